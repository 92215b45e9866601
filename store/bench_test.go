package store

func removeBenchFixtures() {}
