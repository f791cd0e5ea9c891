//! The core's integration tests, one binary (each test binary is linked
//! on its own: one per crate keeps CI's link time down).

mod code_map;
mod fit_and_files;
mod hardware_model;
mod hardware_truth;
mod hostile_claims;
mod hostile_config;
mod planner_properties;
mod planner_rules;
mod planner_scenarios;
