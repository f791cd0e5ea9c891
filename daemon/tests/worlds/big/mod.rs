//! The longest shared worlds, named to sort right after `alone`: started
//! first of the shared ones, so that none of them starts last and runs on
//! while the other slots stand idle.

mod default_scenario;
mod lab_buffers;
