//! What wakes the control loop, with the results that travel with it:
//! watchers, agents, the BMC poller, the executor, BIOS reads, leadership
//! and admins' requests all send a [`Wake`] to the one loop.

use crate::execute::{BiosRead, Executed};

/// One pass's changed readings: node → on (`None`: cannot be read).
pub type Readings = Vec<(String, Option<bool>)>;

/// Why the loop woke; results travel with the wake-up.
#[derive(Debug)]
pub enum Wake {
    Kubernetes,
    Agent,
    /// BMC readings that changed (all of them on the poller's first pass).
    Bmc {
        readings: Readings,
        first_pass: bool,
    },
    /// Power actions finished (or failed) in the background.
    Executed(Vec<Executed>),
    /// BIOS read back after a power-on that staged a profile.
    Bios(Vec<BiosRead>),
    /// This replica's term changed (taken, lost).
    Leadership,
    /// An admin's power request (`accordctl power`): answered by the
    /// next round, or at once by a follower.
    Admin(crate::shared::AdminCall),
}
