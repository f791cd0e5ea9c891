//! The worlds that have the machine alone (`support::lab::world_alone`):
//! their timing must hold. Named to sort first: libtest starts tests in
//! name order, so they run one after the other at the start, and none
//! waits for every slot while shared worlds drain around it.

mod lab_dark;
mod lab_ha;
