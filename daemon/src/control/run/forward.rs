//! What wakes the loop from outside it: the demand watch, admins' power
//! requests and agents' reports, each forwarded as a [`Wake`].

use super::*;

impl Controller {
    pub(super) fn spawn_kube_forwarder(
        &self,
        tx: mpsc::Sender<Wake>,
    ) -> tokio::task::JoinHandle<()> {
        let mut changes = self.observer().watch.changes();
        tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                if tx.send(Wake::Kubernetes).await.is_err() {
                    return;
                }
            }
        })
    }

    /// Opens the door for admins' power requests (`Shared::admin_power`)
    /// and forwards them as wake-ups.
    pub(super) fn spawn_admin_forwarder(
        &self,
        tx: mpsc::Sender<Wake>,
    ) -> tokio::task::JoinHandle<()> {
        let (admin_tx, mut admin_rx) = mpsc::channel(ADMIN_QUEUE);
        if self.shared.admin_power.set(admin_tx).is_err() {
            warn!("a second control loop in this process: admins' power requests go to the first");
        }
        tokio::spawn(async move {
            while let Some(call) = admin_rx.recv().await {
                if tx.send(Wake::Admin(call)).await.is_err() {
                    return;
                }
            }
        })
    }

    pub(super) fn spawn_agent_forwarder(
        &self,
        tx: mpsc::Sender<Wake>,
    ) -> tokio::task::JoinHandle<()> {
        let shared = self.shared.clone();
        tokio::spawn(async move {
            loop {
                shared.agent_reported.notified().await;
                if tx.send(Wake::Agent).await.is_err() {
                    return;
                }
            }
        })
    }
}
