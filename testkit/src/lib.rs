//! Accord's test doubles, out of the crates that ship: nothing in accord,
//! accord-agent, accord-daemon, accord-redfish, accord-kube or accord-api
//! depends on this crate except as a dev-dependency.
//!
//! - [`control_plane`]: the upstream Kubernetes control plane (etcd,
//!   kube-apiserver, kube-controller-manager, kube-scheduler) built from
//!   the pinned modules in `lab/controlplane/`, started with TLS, tokens
//!   and RBAC in a temporary directory and killed on drop;
//! - [`hostile`]: hostile input, generated and mutated from the recorded
//!   fixtures, and a harness running a parser on each case (no panic, no
//!   hang, bounded memory; findings replay from a seed and case index);
//! - [`fake_api`]: an in-repo Kubernetes API server (axum) with real
//!   list/watch semantics;
//! - [`ports`]: loopback ports for children to bind, never handed out
//!   twice by one process and never ones the kernel gives connections.
//! - [`sushy`]: OpenStack's `sushy-emulator --fake` and `sushy-static`
//!   Redfish peers, started on free ports and stopped on drop;
//! - `power` (feature `power`): `SimulatedPower`, the in-memory twin of
//!   accordd's `PowerControl`;
//! - [`process`]: child processes with deadlines (a command run to its end,
//!   a logged child killed on drop, signals, waits for its exit);
//! - [`daemon`]: accordd as a child process (the test's own binary; this
//!   module does not link accord-daemon): token files, `accordd run`, the
//!   wait until it serves, the nodes it lists.

pub mod control_plane;
pub mod daemon;
pub mod fake_api;
pub mod hostile;
pub mod ports;
#[cfg(feature = "power")]
pub mod power;
pub mod process;
pub mod sushy;
