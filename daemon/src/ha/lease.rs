//! The Lease elector: replicas elect a leader on a `coordination.k8s.io/v1`
//! Lease, following client-go's `tools/leaderelection` algorithm.
//!
//! Written here on kube-rs rather than taken from `kube-lease-manager`:
//! its 0.12 requires kube ^4 and k8s-openapi ^0.28, and Accord is on
//! kube 5 and k8s-openapi 0.29.
//!
//! Every `retry_period` the elector reads the Lease (creating it when
//! missing) and then:
//! - held by this replica: renews it (a replace carrying the
//!   resourceVersion read). A renewal that succeeds makes the term valid
//!   until the moment that attempt started plus `renew_deadline`; nothing
//!   else extends it. Once the term runs out, this replica is a follower.
//! - held by another: judged by local observation only, as client-go's
//!   `observedTime`: the (holder, renewTime, resourceVersion) seen and the
//!   local instant it was last seen to change; never the remote renewTime
//!   against this clock (clock skew). Unchanged for `lease_duration` here,
//!   or with no holder, it is taken (transitions + 1). A replica that
//!   first sees a holder (started, or resumed after a pause) waits a full
//!   `lease_duration` from then, and writes nothing before.
//!
//! The Lease's own `leaseDurationSeconds` is written but never trusted:
//! outside input is hostile, and every replica has the same configuration.
//! On shutdown a valid leader stops acting, then releases the Lease (no
//! holder, duration 1 s, client-go's `ReleaseOnCancel`) so another
//! replica takes it at its next try.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::{sleep_until, timeout, timeout_at, Instant};
use tracing::{debug, info, warn};

use crate::config::HaConfig;
use crate::ha::{Fence, Leadership, Term};

/// How long a release on shutdown may take.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);
const FIELD_MANAGER: &str = "accordd";

/// Why one try at the Lease failed (the elector logs it and tries again).
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("cannot {action} Lease {lease}")]
    Api {
        action: &'static str,
        lease: String,
        #[source]
        source: kube::Error,
    },
    #[error("no answer about Lease {lease} within {after:?}")]
    Timeout { lease: String, after: Duration },
    /// A write without the version read would not be a compare-and-swap.
    #[error("Lease {lease} has no metadata.resourceVersion; not writing it")]
    Unversioned { lease: String },
}

/// One replica's candidate for the Lease.
#[derive(Debug)]
pub struct Elector {
    api: Api<Lease>,
    identity: String,
    namespace: String,
    name: String,
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
}

impl Elector {
    /// The Lease `config.lease_name` in `config.namespace`, as
    /// `config.identity()`.
    pub fn new(client: kube::Client, config: &HaConfig) -> Elector {
        Elector {
            api: Api::namespaced(client, &config.namespace),
            identity: config.identity(),
            namespace: config.namespace.clone(),
            name: config.lease_name.clone(),
            lease_duration: Duration::from_secs(config.lease_duration_s),
            renew_deadline: Duration::from_secs(config.renew_deadline_s),
            // Never a busy loop, whatever the configuration.
            retry_period: Duration::from_secs(config.retry_period_s.max(1)),
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Runs until `shutdown` resolves; the returned Leadership follows its
    /// terms (a follower with no known leader at first).
    pub fn spawn(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> (Leadership, tokio::task::JoinHandle<()>) {
        let (tx, rx) = watch::channel(Term::Follower { leader: None });
        let run = Run {
            e: self,
            tx,
            seen: None,
            ours: None,
            most_transitions: None,
        };
        (Leadership::elected(rx), tokio::spawn(run.run(shutdown)))
    }

    fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn api_error(&self, action: &'static str, source: kube::Error) -> LeaseError {
        LeaseError::Api {
            action,
            lease: self.lease(),
            source,
        }
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    fn post_params() -> PostParams {
        PostParams {
            dry_run: false,
            field_manager: Some(FIELD_MANAGER.to_owned()),
        }
    }
}

/// What identifies one state of the Lease.
#[derive(Debug, Clone, PartialEq)]
struct Record {
    holder: Option<String>,
    renew_time: Option<MicroTime>,
    resource_version: Option<String>,
}

impl Record {
    fn of(lease: &Lease) -> Record {
        let spec = lease.spec.as_ref();
        Record {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            renew_time: spec.and_then(|s| s.renew_time.clone()),
            resource_version: lease.metadata.resource_version.clone(),
        }
    }
}

#[derive(Debug)]
struct Seen {
    record: Record,
    /// When `record` was first seen here (the local observation clock).
    since: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Write {
    Renew,
    Take,
}

#[derive(Debug)]
struct Run {
    e: Elector,
    tx: watch::Sender<Term>,
    seen: Option<Seen>,
    /// The Lease as this replica's last successful write returned it.
    ours: Option<Lease>,
    /// The most transitions seen: a Lease wiped or deleted and made again
    /// does not bring back a fence already used.
    most_transitions: Option<i32>,
}

impl Run {
    async fn run(mut self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        'run: loop {
            self.expire();
            let start = Instant::now();
            // A leader's try ends when its term does: it must not hang past it.
            let bound = match self.valid_until() {
                Some(v) => v.min(start + self.e.renew_deadline),
                None => start + self.e.renew_deadline,
            };
            let timed_out = LeaseError::Timeout {
                lease: self.e.lease(),
                after: bound - start,
            };
            let outcome = tokio::select! {
                () = &mut shutdown => break 'run,
                r = timeout_at(bound, self.round(start)) => r.unwrap_or(Err(timed_out)),
            };
            if let Err(e) = outcome {
                warn!(identity = %self.e.identity, error = %accord::config_file::error_chain(&e),
                      "a try at the lease failed; trying again");
            }
            let next = start + self.e.retry_period;
            loop {
                self.expire();
                if Instant::now() >= next {
                    break;
                }
                let wake = self.valid_until().map_or(next, |v| v.min(next));
                tokio::select! {
                    () = &mut shutdown => break 'run,
                    () = sleep_until(wake) => {}
                }
            }
        }
        self.release().await;
    }

    fn valid_until(&self) -> Option<Instant> {
        match &*self.tx.borrow() {
            Term::Leader { valid_until, .. } => Some(*valid_until),
            Term::Follower { .. } => None,
        }
    }

    fn publish(&self, term: Term) {
        self.tx.send_if_modified(|t| {
            let changed = *t != term;
            *t = term;
            changed
        });
    }

    /// A leader whose term ran out becomes a follower.
    fn expire(&self) {
        let lost = match &*self.tx.borrow() {
            Term::Leader { fence, valid_until } if Instant::now() >= *valid_until => {
                Some(fence.transitions)
            }
            _ => None,
        };
        if let Some(transitions) = lost {
            warn!(identity = %self.e.identity, lease = %self.e.lease(), transitions,
                  renew_deadline_s = self.e.renew_deadline.as_secs(),
                  "lost the lease: could not renew within the renew deadline");
            self.publish(Term::Follower { leader: None });
        }
    }

    /// Notes the Lease's state; the observation clock restarts on a change.
    fn observe(&mut self, record: Record) {
        if self.seen.as_ref().is_some_and(|s| s.record == record) {
            return;
        }
        let before = self.seen.as_ref().and_then(|s| s.record.holder.as_deref());
        if let Some(h) = record.holder.as_deref() {
            if h != self.e.identity && before != Some(h) {
                info!(identity = %self.e.identity, holder = %h, lease = %self.e.lease(),
                      "a new leader holds the lease");
            }
        }
        self.seen = Some(Seen {
            record,
            since: Instant::now(),
        });
    }

    async fn round(&mut self, start: Instant) -> Result<(), LeaseError> {
        let got = self.e.api.get_opt(&self.e.name).await;
        let Some(lease) = got.map_err(|s| self.e.api_error("read", s))? else {
            return self.create(start).await;
        };
        let seen_transitions = lease.spec.as_ref().and_then(|s| s.lease_transitions);
        self.most_transitions = self.most_transitions.max(seen_transitions);
        let record = Record::of(&lease);
        let holder = record.holder.clone();
        self.observe(record);
        let since = self.seen.as_ref().map_or_else(Instant::now, |s| s.since);
        match holder {
            Some(h) if h == self.e.identity => self.write(lease, start, Write::Renew).await,
            Some(h) if since.elapsed() < self.e.lease_duration => {
                // Held by another and not expired by our observation: no write.
                self.publish(Term::Follower { leader: Some(h) });
                Ok(())
            }
            _ => self.write(lease, start, Write::Take).await,
        }
    }

    async fn create(&mut self, start: Instant) -> Result<(), LeaseError> {
        let now = MicroTime(Timestamp::now());
        // 0, as client-go; past every fence seen if the Lease vanished.
        let transitions = self
            .most_transitions
            .map_or(0, |t| t.max(0).saturating_add(1));
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.e.name.clone()),
                namespace: Some(self.e.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.e.identity.clone()),
                lease_transitions: Some(transitions),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_duration_seconds: Some(self.e.duration_seconds()),
                ..LeaseSpec::default()
            }),
        };
        match self.e.api.create(&Elector::post_params(), &lease).await {
            Ok(written) => {
                self.lead(written, start, transitions);
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.is_already_exists() || s.is_conflict() => {
                debug!(identity = %self.e.identity, "another replica created the lease first");
                Ok(())
            }
            Err(source) => Err(self.e.api_error("create", source)),
        }
    }

    /// Renews or takes `lease` (as read) with a compare-and-swap on its
    /// resourceVersion.
    async fn write(
        &mut self,
        mut lease: Lease,
        start: Instant,
        how: Write,
    ) -> Result<(), LeaseError> {
        if lease.metadata.resource_version.is_none() {
            return Err(LeaseError::Unversioned {
                lease: self.e.lease(),
            });
        }
        let spec = lease.spec.take().unwrap_or_default();
        let previous = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let now = MicroTime(Timestamp::now());
        let transitions = spec.lease_transitions.unwrap_or(0).max(0);
        let (transitions, acquire_time) = match how {
            Write::Renew => (
                transitions,
                spec.acquire_time.clone().unwrap_or(now.clone()),
            ),
            Write::Take => {
                let most = transitions.max(self.most_transitions.unwrap_or(0));
                (most.saturating_add(1), now.clone())
            }
        };
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(self.e.identity.clone()),
            lease_transitions: Some(transitions),
            acquire_time: Some(acquire_time),
            renew_time: Some(now),
            lease_duration_seconds: Some(self.e.duration_seconds()),
            ..spec
        });
        match self
            .e
            .api
            .replace(&self.e.name, &Elector::post_params(), &lease)
            .await
        {
            Ok(written) => {
                self.lead(written, start, transitions);
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.is_conflict() => {
                // Another writer came between our read and write. A renewal
                // leaves the term as it was (it runs out unless renewed).
                debug!(identity = %self.e.identity, ?how, "the lease changed under us; trying again next period");
                if how == Write::Take {
                    self.publish(Term::Follower { leader: previous });
                }
                Ok(())
            }
            Err(source) => Err(self.e.api_error(
                match how {
                    Write::Renew => "renew",
                    Write::Take => "take",
                },
                source,
            )),
        }
    }

    /// A successful write of the Lease as holder, in an attempt begun at
    /// `start`.
    fn lead(&mut self, written: Lease, start: Instant, transitions: i32) {
        self.most_transitions = self.most_transitions.max(Some(transitions));
        let fence = Fence {
            holder: self.e.identity.clone(),
            transitions,
        };
        let again = matches!(&*self.tx.borrow(), Term::Leader { fence: f, .. } if *f == fence);
        if !again {
            info!(identity = %self.e.identity, transitions, lease = %self.e.lease(), "leading");
        }
        self.publish(Term::Leader {
            fence,
            valid_until: start + self.e.renew_deadline,
        });
        self.observe(Record::of(&written));
        self.ours = Some(written);
    }

    /// On shutdown: a leader within its term stops acting, then gives the
    /// Lease up (best effort, bounded).
    async fn release(&mut self) {
        let valid = matches!(&*self.tx.borrow(), Term::Leader { valid_until, .. } if Instant::now() < *valid_until);
        self.publish(Term::Follower { leader: None });
        let Some(mut lease) = self.ours.take().filter(|_| valid) else {
            return;
        };
        let spec = lease.spec.take().unwrap_or_default();
        let now = MicroTime(Timestamp::now());
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            ..spec
        });
        let pp = Elector::post_params();
        let put = self.e.api.replace(&self.e.name, &pp, &lease);
        let error = match timeout(RELEASE_TIMEOUT, put).await {
            Ok(Ok(_)) => {
                info!(identity = %self.e.identity, lease = %self.e.lease(), "released the lease");
                return;
            }
            Ok(Err(source)) => self.e.api_error("release", source),
            Err(_) => LeaseError::Timeout {
                lease: self.e.lease(),
                after: RELEASE_TIMEOUT,
            },
        };
        warn!(identity = %self.e.identity, error = %accord::config_file::error_chain(&error),
              "could not release the lease; another replica takes it after the lease duration");
    }
}
