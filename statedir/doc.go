// Package statedir is the layout of a tether state directory: the store,
// one private directory per task under tasks/, and the files in it. Every
// path of it is spelled here.
package statedir
