//! What effects report back to the next round: finished power actions
//! and BIOS reads, and the BIOS reads a round asks for. Their errors come
//! typed from whatever ran them (accordd's Redfish executor, the
//! simulator) behind a shared `dyn Error`, so this crate names no client.

use std::error::Error;
use std::sync::Arc;

use accord::hardware::BiosSeen;

/// Why an effect failed, as its runner's own error.
pub type Failure = Arc<dyn Error + Send + Sync>;

/// What executing did, per intent.
#[derive(Debug, Clone)]
pub struct Executed {
    pub intent: u64,
    pub node: String,
    pub result: Result<(), Failure>,
}

/// A BIOS read the loop asked for: the node and the profile staged on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BiosCheck {
    pub node: String,
    pub profile: String,
}

/// What a BIOS read found (returned to the loop as power results are).
#[derive(Debug, Clone)]
pub struct BiosRead {
    pub node: String,
    pub profile: String,
    pub result: Result<BiosSeen, Failure>,
}
