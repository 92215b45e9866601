package proptest
