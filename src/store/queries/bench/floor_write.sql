-- store::bench_floor_write: one row of the benchmark floor (the bench-floor build; scripts/bench
-- creates the table). ?1 now.
INSERT INTO bench_floor (at) VALUES (?1)
