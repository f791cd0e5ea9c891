//! Agent commands in the store (tree `commands`): each node's latest
//! command, journaled like a power intent. A command is written and
//! flushed before any agent can be handed it; the API hands an open,
//! deliverable one to the node's agent in the answer to its heartbeat or
//! report (marking it sent the first time); the agent's report carrying
//! the outcome closes it; the control loop closes one whose deadline
//! passed. Generations increase per node across commands, so an agent
//! never mistakes a new command for one it already carried out.

use accord_api::agent::{AgentCommand, CommandOutcome, CommandRecord, CommandResult, CommandState};

use super::{io, Store, StoreError};

impl Store {
    fn command_record(&self, node: &str) -> Result<Option<CommandRecord>, StoreError> {
        let Some(bytes) = self.commands.get(node).map_err(io("read command"))? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| StoreError::Corrupt {
                node: node.to_owned(),
                source,
            })
    }

    fn put_command(&self, rec: &CommandRecord) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(rec).expect("command records serialize");
        self.commands
            .insert(rec.node.as_bytes(), bytes)
            .map_err(io("write command"))?;
        Ok(())
    }

    /// Journals `rec` as the node's new command, numbered one past the
    /// node's last generation (whatever `rec.generation` says), and
    /// flushes before returning it. Refused while the node's last command
    /// is still open: one command per node at a time.
    pub fn open_command(&self, mut rec: CommandRecord) -> Result<CommandRecord, StoreError> {
        let _one = self.commands_lock.lock().unwrap_or_else(|e| e.into_inner());
        let last = self.command_record(&rec.node)?;
        if let Some(l) = last.as_ref().filter(|l| l.is_open()) {
            return Err(StoreError::CommandOpen {
                node: rec.node.clone(),
                generation: l.generation,
            });
        }
        rec.generation = last.map_or(1, |l| l.generation.saturating_add(1));
        rec.state = CommandState::Open;
        self.put_command(&rec)?;
        self.flush()?;
        Ok(rec)
    }

    /// The command to hand `node`'s agent now: its open, deliverable one.
    /// The first hand-over is recorded (`Sent`); not flushed (a crash only
    /// forgets that it was sent, and an agent answers a repeat with the
    /// outcome it has).
    pub fn command_for_agent(
        &self,
        node: &str,
        now: u64,
    ) -> Result<Option<AgentCommand>, StoreError> {
        self.command_for_agent_where(node, now, |_| true)
    }

    /// [`Store::command_for_agent`], for a command `may_hand` allows
    /// (with replicas: one the shared state holds under this term).
    pub fn command_for_agent_where(
        &self,
        node: &str,
        now: u64,
        may_hand: impl Fn(&CommandRecord) -> bool,
    ) -> Result<Option<AgentCommand>, StoreError> {
        let _one = self.commands_lock.lock().unwrap_or_else(|e| e.into_inner());
        let Some(mut rec) = self.command_record(node)? else {
            return Ok(None);
        };
        if !rec.deliver || !may_hand(&rec) {
            return Ok(None);
        }
        match rec.state {
            CommandState::Open => {
                rec.state = CommandState::Sent { at: now };
                self.put_command(&rec)?;
            }
            CommandState::Sent { .. } => {}
            CommandState::Closed { .. } => return Ok(None),
        }
        Ok(Some(rec.command()))
    }

    /// An agent's outcome: closes `node`'s command of that generation when
    /// it is open (true then), and flushes. Any other generation (an old
    /// one repeated, one from a store that was replaced) changes nothing.
    pub fn command_outcome(
        &self,
        node: &str,
        outcome: &CommandOutcome,
        now: u64,
    ) -> Result<bool, StoreError> {
        self.close_command(node, outcome.generation, outcome.result.clone(), now)
    }

    /// Closes `node`'s command `generation` with `result` when it is still
    /// open (true then), and flushes.
    pub fn close_command(
        &self,
        node: &str,
        generation: u64,
        result: CommandResult,
        now: u64,
    ) -> Result<bool, StoreError> {
        let _one = self.commands_lock.lock().unwrap_or_else(|e| e.into_inner());
        let Some(mut rec) = self
            .command_record(node)?
            .filter(|r| r.generation == generation && r.is_open())
        else {
            return Ok(false);
        };
        rec.state = CommandState::Closed { at: now, result };
        self.put_command(&rec)?;
        self.flush()?;
        Ok(true)
    }

    /// Lets `node`'s agent be handed its command `generation` (the GPU
    /// Operator has done its part); flushed.
    pub fn release_command(&self, node: &str, generation: u64) -> Result<bool, StoreError> {
        let _one = self.commands_lock.lock().unwrap_or_else(|e| e.into_inner());
        let Some(mut rec) = self
            .command_record(node)?
            .filter(|r| r.generation == generation && r.is_open() && !r.deliver)
        else {
            return Ok(false);
        };
        rec.deliver = true;
        self.put_command(&rec)?;
        self.flush()?;
        Ok(true)
    }

    /// Every node's latest command, by node. Records that cannot be
    /// decoded are errors: they are a journal, not a cache.
    pub fn commands(&self) -> Result<Vec<CommandRecord>, StoreError> {
        self.commands
            .iter()
            .map(|kv| {
                let (k, v) = kv.map_err(io("list commands"))?;
                serde_json::from_slice(&v).map_err(|source| StoreError::Corrupt {
                    node: String::from_utf8_lossy(&k).into_owned(),
                    source,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use accord::fleet::MigVia;
    use accord_api::agent::{CommandAction, MigTarget};

    use super::*;

    fn rec(node: &str) -> CommandRecord {
        CommandRecord {
            node: node.into(),
            generation: 0,
            action: CommandAction::ApplyMig {
                gpus: vec![MigTarget {
                    index: 0,
                    uuid: None,
                    layout: vec!["1g.10gb@0".into()],
                }],
            },
            via: MigVia::Agent,
            targets: Vec::new(),
            mig_config: None,
            deliver: true,
            for_workloads: vec!["ml/a".into()],
            opened_at: 10,
            deadline: 100,
            state: CommandState::Open,
        }
    }

    #[test]
    fn generations_increase_one_open_command_per_node_and_outcomes_close_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let first = store.open_command(rec("n1")).unwrap();
        assert_eq!(first.generation, 1);
        assert!(matches!(
            store.open_command(rec("n1")),
            Err(StoreError::CommandOpen { generation: 1, .. })
        ));
        let handed = store.command_for_agent("n1", 20).unwrap().unwrap();
        assert_eq!(handed.generation, 1);
        assert!(matches!(
            store.commands().unwrap()[0].state,
            CommandState::Sent { at: 20 }
        ));
        // A stale generation changes nothing; the right one closes it.
        let done = |generation| CommandOutcome {
            generation,
            result: CommandResult::Done,
        };
        assert!(!store.command_outcome("n1", &done(7), 30).unwrap());
        assert!(store.command_outcome("n1", &done(1), 30).unwrap());
        assert!(!store.command_outcome("n1", &done(1), 31).unwrap());
        assert_eq!(store.command_for_agent("n1", 40).unwrap(), None);
        assert_eq!(store.open_command(rec("n1")).unwrap().generation, 2);
        drop(store);
        // Durable: reopened, the open command is there.
        let store = Store::open(dir.path()).unwrap();
        let all = store.commands().unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].generation, 2);
        assert!(all[0].is_open());
    }

    #[test]
    fn an_undeliverable_command_is_handed_over_only_once_released() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut r = rec("n1");
        r.deliver = false;
        r.via = MigVia::GpuOperator;
        r.action = CommandAction::Rediscover;
        let r = store.open_command(r).unwrap();
        assert_eq!(store.command_for_agent("n1", 20).unwrap(), None);
        assert!(store.release_command("n1", r.generation).unwrap());
        assert_eq!(
            store.command_for_agent("n1", 21).unwrap().unwrap().action,
            CommandAction::Rediscover
        );
    }
}
