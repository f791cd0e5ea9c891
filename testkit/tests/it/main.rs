//! The testkit's integration tests, one binary (the hostile harness's
//! tests keep their own: they install a counting global allocator).

mod fake_api_discovery;
mod fake_api_leases;
