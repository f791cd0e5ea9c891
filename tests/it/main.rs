//! The core's integration tests, one binary (each test binary is linked
//! on its own: one per crate keeps CI's link time down).

// A few hostile inputs are bounded in time (they would hang otherwise);
// the core itself reads no clock (../../clippy.toml).
#![allow(clippy::disallowed_methods)]

mod code_guards;
mod code_map;
mod fit_and_files;
mod hardware_model;
mod hardware_truth;
mod hostile_claims;
mod hostile_config;
mod planner_properties;
mod planner_relations;
mod planner_rules;
mod planner_scenarios;
mod planner_volumes;
