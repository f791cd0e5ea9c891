//! A machine's BIOS as its BMC shows it after a power-on that staged a
//! profile: what the profile wants, what is current, what is still
//! staged. Plain data: the Redfish client reads it, the decider compares.

use serde_json::{Map, Value};

/// A node's BIOS as read back after a power-on that staged a profile.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BiosSeen {
    /// The profile's attributes, as the inventory has them now.
    pub wanted: Map<String, Value>,
    /// The Bios resource's current attributes.
    pub current: Map<String, Value>,
    /// Attributes still staged in the `@Redfish.Settings` object.
    pub pending: Map<String, Value>,
}
