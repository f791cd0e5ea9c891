//! Writes of node records: reports (identity checked, within the
//! [`StoreLimits`](super::StoreLimits)), heartbeats, replacement and forgetting.

use accord::hardware::NodeHardware;
use serde::Deserialize;

use super::{
    io, joined, Accepted, Beat, IdentityRule, Liveness, MachineIdentity, NodeRecord, ReportOutcome,
    Store, StoreError, StoredNode,
};

/// 32 random bytes, hex: an agent session.
fn new_session(node: &str) -> Result<String, StoreError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|source| StoreError::Session {
        node: node.to_owned(),
        source,
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Constant-time equality of a given and a kept session.
fn same_session(given: Option<&str>, kept: Option<&str>) -> bool {
    use subtle::ConstantTimeEq;
    match (given, kept) {
        (Some(g), Some(k)) => bool::from(g.as_bytes().ct_eq(k.as_bytes())),
        _ => false,
    }
}

/// What a heartbeat needs of a node's record.
#[derive(Deserialize)]
struct Head {
    generation: u64,
    #[serde(default)]
    session: Option<String>,
}

impl Store {
    /// Writes a node's record and liveness, within the [`StoreLimits`]
    /// (refused with nothing written past one), and flushes.
    fn put(&self, n: &StoredNode, live: &Liveness) -> Result<(), StoreError> {
        let node = serde_json::to_vec(n).expect("records serialize");
        let live = serde_json::to_vec(live).expect("records serialize");
        let mut usage = self
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let size = node.len() as u64;
        let old = usage.bytes.get(&n.name).copied();
        let full = |what: String| StoreError::Full {
            node: n.name.clone(),
            what,
        };
        // A record that does not grow is always taken (limits lowered
        // since, or a store from before them): an unchanged report must
        // still make its agent up.
        let grows = size > old.unwrap_or(0);
        if grows && size > self.limits.max_node_bytes {
            return Err(full(format!(
                "its record would take {size} bytes, over store.max_node_bytes ({})",
                self.limits.max_node_bytes
            )));
        }
        if old.is_none() && usage.bytes.len() >= self.limits.max_nodes {
            return Err(full(format!(
                "the store holds {} nodes, store.max_nodes; forget one \
                 (`accordctl node forget NAME`) or raise the limit",
                usage.bytes.len()
            )));
        }
        let total = usage.total - old.unwrap_or(0) + size;
        if grows && total > self.limits.max_bytes {
            return Err(full(format!(
                "node records would take {total} bytes, over store.max_bytes ({})",
                self.limits.max_bytes
            )));
        }
        self.nodes.put(&n.name, &node).map_err(io("write node"))?;
        // Counted as soon as the record is written, whatever follows.
        usage.total = total;
        usage.bytes.insert(n.name.clone(), size);
        self.liveness
            .insert(n.name.as_bytes(), live)
            .map_err(io("write liveness"))?;
        drop(usage);
        // Durable before the caller acknowledges.
        self.flush()
    }

    /// Forgets a node: its record, identity, agent session, liveness and
    /// scheduler view; whether it was registered. Its agent's next report
    /// registers it anew (where it may: `ApiState::enrolled`).
    pub fn forget(&self, name: &str) -> Result<bool, StoreError> {
        let mut usage = self
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let found = self.nodes.remove(name).map_err(io("forget node"))?;
        if let Some(old) = usage.bytes.remove(name) {
            usage.total -= old;
        }
        self.liveness.remove(name).map_err(io("forget liveness"))?;
        self.views
            .remove(name)
            .map_err(io("forget scheduler view"))?;
        drop(usage);
        self.flush()?;
        Ok(found)
    }

    /// Stores a hardware report for `name`. Refused, with nothing
    /// written, when the machine identity contradicts the stored one
    /// ([`IdentityRule::Lenient`]).
    pub fn report(
        &self,
        name: &str,
        hardware: NodeHardware,
        agent_version: Option<String>,
        now: u64,
    ) -> Result<(ReportOutcome, NodeRecord), StoreError> {
        self.report_as(
            name,
            hardware,
            agent_version,
            now,
            IdentityRule::Lenient,
            None,
        )
        .map(|a| (a.outcome, a.record))
    }

    /// Stores a hardware report for `name`, its machine identity checked
    /// by `rule`; refused with nothing written otherwise. `session` is the
    /// one the agent sent: kept when it is the node's current one, else a
    /// new one is made (the report proved the machine) and returned.
    /// Under [`IdentityRule::Bound`] the binding only grows: a bound serial
    /// or GPU set stays; one not yet bound is added.
    pub fn report_as(
        &self,
        name: &str,
        hardware: NodeHardware,
        agent_version: Option<String>,
        now: u64,
        rule: IdentityRule,
        session: Option<&str>,
    ) -> Result<Accepted, StoreError> {
        let reported = MachineIdentity::of(&hardware);
        if rule == IdentityRule::Bound && reported.is_empty() {
            return Err(StoreError::NoIdentity {
                node: name.to_owned(),
            });
        }
        let mut live = self.liveness_of(name)?;
        live.last_seen = now;
        live.last_report = now;
        if agent_version.is_some() {
            live.agent_version = agent_version;
        }
        let (outcome, stored) = match self.stored(name)? {
            None => (
                ReportOutcome::Registered,
                StoredNode {
                    name: name.to_owned(),
                    identity: reported,
                    hardware,
                    generation: 1,
                    reported_at: now,
                    replacement_allowed: false,
                    session: Some(new_session(name)?),
                },
            ),
            Some(old) => {
                let proven = match rule {
                    IdentityRule::Lenient => old.identity.compatible(&reported),
                    IdentityRule::Bound => reported.proves(&old.identity),
                };
                if !old.replacement_allowed && !proven {
                    return Err(StoreError::IdentityMismatch {
                        node: name.to_owned(),
                        stored: old.identity.to_string(),
                        reported: reported.to_string(),
                    });
                }
                // Under a shared token the binding only grows by proof: a
                // serial is added once, the bound GPU UUIDs stay as they
                // were (replacing them with a report's that shares half
                // would let two reports walk the name to another machine);
                // a change of machine is `accordctl node replace`.
                let identity = match rule {
                    IdentityRule::Bound if !old.replacement_allowed && !old.identity.is_empty() => {
                        MachineIdentity {
                            serial: old.identity.serial.clone().or(reported.serial),
                            gpu_uuids: if old.identity.gpu_uuids.is_empty() {
                                reported.gpu_uuids
                            } else {
                                old.identity.gpu_uuids.clone()
                            },
                        }
                    }
                    _ => reported,
                };
                // The agent's session goes on; any other report that
                // proved the machine (a restarted agent) starts a new one.
                let session =
                    if !old.replacement_allowed && same_session(session, old.session.as_deref()) {
                        old.session.clone()
                    } else {
                        Some(new_session(name)?)
                    };
                let changed = old.hardware != hardware || old.identity != identity;
                let outcome = if changed {
                    ReportOutcome::Changed
                } else {
                    ReportOutcome::Unchanged
                };
                (
                    outcome,
                    StoredNode {
                        name: name.to_owned(),
                        generation: old.generation + u64::from(changed),
                        reported_at: if changed { now } else { old.reported_at },
                        replacement_allowed: false,
                        identity,
                        hardware,
                        session,
                    },
                )
            }
        };
        let session = stored.session.clone().expect("set above");
        self.put(&stored, &live)?;
        // Both halves are in hand: no need to read them back.
        Ok(Accepted {
            outcome,
            record: joined(stored, live),
            session,
        })
    }

    /// Records a sign of life; `None` (and nothing written) for a node
    /// never registered. Returns the node's generation.
    pub fn heartbeat(&self, name: &str, beat: Liveness) -> Result<Option<u64>, StoreError> {
        Ok(match self.heartbeat_as(name, beat, None, false)? {
            Beat::Recorded(g) => Some(g),
            Beat::NotRegistered | Beat::NoSession => None,
        })
    }

    /// Records a sign of life, refused (nothing written) when
    /// `need_session` and `session` is not the node's current one.
    pub fn heartbeat_as(
        &self,
        name: &str,
        beat: Liveness,
        session: Option<&str>,
        need_session: bool,
    ) -> Result<Beat, StoreError> {
        let Some(stored) = self.stored_head(name)? else {
            return Ok(Beat::NotRegistered);
        };
        if need_session && !same_session(session, stored.session.as_deref()) {
            return Ok(Beat::NoSession);
        }
        let old = self.liveness_of(name)?;
        let mut live = beat;
        if live.agent_version.is_none() {
            live.agent_version = old.agent_version;
        }
        live.last_report = old.last_report;
        let bytes = serde_json::to_vec(&live).expect("records serialize");
        // Under the usage lock, so a node forgotten since it was read is
        // not given its liveness back.
        let usage = self
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !usage.bytes.contains_key(name) {
            return Ok(Beat::NotRegistered);
        }
        self.liveness
            .insert(name.as_bytes(), bytes)
            .map_err(io("write liveness"))?;
        drop(usage);
        Ok(Beat::Recorded(stored.generation))
    }

    /// The generation and agent session of `name`, without decoding its
    /// hardware model.
    fn stored_head(&self, name: &str) -> Result<Option<Head>, StoreError> {
        self.node_as(name)
    }

    /// Lets the next report for `name` carry a new machine identity.
    pub fn allow_replacement(&self, name: &str) -> Result<bool, StoreError> {
        let Some(mut stored) = self.stored(name)? else {
            return Ok(false);
        };
        stored.replacement_allowed = true;
        // The replaced machine's agent proves nothing any more.
        stored.session = None;
        let live = self.liveness_of(name)?;
        self.put(&stored, &live)?;
        Ok(true)
    }
}
