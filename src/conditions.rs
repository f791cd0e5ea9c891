//! The status Accord writes on other components' objects, one type each
//! for the decider that works it out and the writer that sends it:
//! ProvisioningRequest conditions (as Kueue reads them) and CapacityBuffer
//! status (as the upstream buffer controller and autoscaler write it).

/// One condition: ProvisioningRequest `Accepted`, `Provisioned`,
/// `Failed`, `BookingExpired`, `CapacityRevoked`; CapacityBuffer
/// `ReadyForProvisioning`, `Provisioning`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub type_: String,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

/// A CapacityBuffer's status as Accord writes it (and reads it back):
/// `replicas`, `podTemplateRef`, `podTemplateGeneration`,
/// `provisioningStrategy`, and the conditions `ReadyForProvisioning`, then
/// `Provisioning`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BufferStatus {
    pub replicas: Option<u32>,
    pub pod_template: Option<String>,
    pub pod_template_generation: Option<i64>,
    pub strategy: Option<String>,
    pub conditions: Vec<Condition>,
}
