//! The in-memory power twin: accordd's [`PowerControl`] over machines that
//! change state the moment they are told (or never, for the ones set to
//! fail), with a log of every Reset sent. For the executor and control-loop
//! tests that need no BMC at all.

use std::collections::BTreeMap;
use std::sync::Mutex;

use accordd::execute::{PowerControl, PowerError};

/// Machines by node name: on or off.
#[derive(Debug, Default)]
pub struct SimulatedPower {
    pub state: Mutex<BTreeMap<String, bool>>,
    /// Nodes whose power-on never lands.
    pub broken: Mutex<Vec<String>>,
    /// `node on|off` per Reset sent.
    pub resets: Mutex<Vec<String>>,
}

impl SimulatedPower {
    /// `nodes`, all off.
    pub fn with_nodes(nodes: &[&str]) -> SimulatedPower {
        let s = SimulatedPower::default();
        for n in nodes {
            s.state.lock().expect("lock").insert((*n).to_owned(), false);
        }
        s
    }

    /// Every Reset sent so far, as `node on|off`.
    pub fn resets(&self) -> Vec<String> {
        self.resets.lock().expect("lock").clone()
    }

    fn set(&self, node: &str, on: bool) -> Result<(), PowerError> {
        let mut state = self.state.lock().expect("lock");
        let s = state.get_mut(node).ok_or_else(|| unknown(node))?;
        if *s == on {
            return Ok(());
        }
        self.resets
            .lock()
            .expect("lock")
            .push(format!("{node} {}", if on { "on" } else { "off" }));
        if on && self.broken.lock().expect("lock").iter().any(|b| b == node) {
            return Err(PowerError::Refused {
                node: node.to_owned(),
                reason: "power state still Off after the timeout".into(),
            });
        }
        *s = on;
        Ok(())
    }
}

fn unknown(node: &str) -> PowerError {
    PowerError::Refused {
        node: node.to_owned(),
        reason: "unknown to the simulation".into(),
    }
}

impl PowerControl for SimulatedPower {
    async fn is_on(&self, node: &str) -> Result<bool, PowerError> {
        self.state
            .lock()
            .expect("lock")
            .get(node)
            .copied()
            .ok_or_else(|| unknown(node))
    }
    async fn power_on(&self, node: &str) -> Result<(), PowerError> {
        self.set(node, true)
    }
    async fn power_off(&self, node: &str, _force: bool) -> Result<(), PowerError> {
        self.set(node, false)
    }
    async fn verify(&self, node: &str, on: bool) -> Result<(), PowerError> {
        // The twin's changes land at once: an earlier Reset has landed.
        if self.is_on(node).await? == on {
            Ok(())
        } else {
            self.set(node, on)
        }
    }
}
