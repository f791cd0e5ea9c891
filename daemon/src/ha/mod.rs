//! High availability: replicas elected on a `coordination.k8s.io/v1`
//! Lease (`lease.rs`), the state a new leader needs kept in the API server
//! (`shared_state.rs`), and the gate every action passes (`Leadership`).
//!
//! Only the leader acts. Every action (a BMC request, a Kubernetes write,
//! an agent command handed over) asks [`Leadership::may_act`] at the last
//! moment; a leader whose term ran out (it could not renew within the
//! renew deadline, or it was paused past it) stops at once, before any
//! other replica may take the Lease.

pub mod lease;
pub mod shared_state;

use tokio::sync::watch;
use tokio::time::Instant;

/// The term an action belongs to (accord-api's, as intents carry it):
/// written on every intent and on every `AccordNode` object the leader
/// writes; a write by a replica whose fence is older than the object's is
/// refused.
pub use accord_api::control::Fence;

/// What this replica is now.
#[derive(Debug, Clone, PartialEq)]
pub enum Term {
    /// Not leading; `leader`: the holder last seen, if any.
    Follower { leader: Option<String> },
    /// Leading in `fence`'s term until `valid_until` (the last renewal's
    /// start plus the renew deadline) unless renewed again.
    Leader { fence: Fence, valid_until: Instant },
}

/// Why this replica may not act now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("this replica does not lead{}", leader.as_ref().map(|l| format!(" (the leader is {l})")).unwrap_or_default())]
pub struct NotLeading {
    pub leader: Option<String>,
}

/// The gate: a single replica always acts; an HA replica acts while its
/// term is valid.
#[derive(Debug, Clone)]
pub struct Leadership {
    term: Option<watch::Receiver<Term>>,
}

impl Leadership {
    /// One replica, no Lease: always acts, no fence.
    pub fn single() -> Leadership {
        Leadership { term: None }
    }

    /// Follows the elector's terms.
    pub fn elected(term: watch::Receiver<Term>) -> Leadership {
        Leadership { term: Some(term) }
    }

    pub fn is_ha(&self) -> bool {
        self.term.is_some()
    }

    /// The term now (a single replica: always a leader without a fence,
    /// shown as `None`).
    pub fn term(&self) -> Option<Term> {
        self.term.as_ref().map(|t| t.borrow().clone())
    }

    /// Whether an action may go now: `Ok(None)` a single replica,
    /// `Ok(Some(fence))` a leader within its term, else why not. Checked
    /// against the clock, not only the elector's last word: a process
    /// paused past its term finds it over on resuming, before its elector
    /// has run.
    pub fn may_act(&self) -> Result<Option<Fence>, NotLeading> {
        let Some(term) = &self.term else {
            return Ok(None);
        };
        match &*term.borrow() {
            Term::Leader { fence, valid_until } if Instant::now() < *valid_until => {
                Ok(Some(fence.clone()))
            }
            // The term ran out: who leads now is not known here.
            Term::Leader { .. } => Err(NotLeading { leader: None }),
            Term::Follower { leader } => Err(NotLeading {
                leader: leader.clone(),
            }),
        }
    }

    /// Waits until the term changes (never, for a single replica).
    pub async fn changed(&mut self) {
        match &mut self.term {
            Some(t) => {
                if t.changed().await.is_err() {
                    std::future::pending::<()>().await
                }
            }
            None => std::future::pending::<()>().await,
        }
    }
}
