//! How a BMC is logged in to: a Redfish session reused across requests
//! (else Basic), failed logins bounded, credentials re-read when their file
//! changes, the session deleted on close.

use super::*;

impl Bmc {
    pub(super) async fn auth_header(&self) -> Result<AuthHeader, RedfishError> {
        // One session per BMC: creation is serialized, since BMCs allow
        // few sessions (iDRAC: 8) and refuse the rest.
        let mut auth = self.auth.lock().await;
        let refreshed = self.logins().refresh(false);
        match refreshed {
            Ok(true) => {
                info!(bmc = %self.target.name, "credentials file changed: logging in with the new credentials");
                self.end_session(&mut auth).await;
            }
            Ok(false) => {}
            Err(problem) => {
                warn!(bmc = %self.target.name, problem = %problem, "credentials file cannot be read again; the credentials in use are kept");
            }
        }
        let Some(creds) = self.logins().credentials().cloned() else {
            return Ok(AuthHeader::None);
        };
        if matches!(*auth, Auth::Unknown | Auth::Basic) {
            // A session to make, or basic auth (every request a login).
            self.login_allowed()?;
        }
        if let Auth::Unknown = *auth {
            *auth = match self.open_session(&creds).await {
                Ok(a) => {
                    if matches!(a, Auth::Session { .. }) {
                        self.logins().succeeded();
                    }
                    a
                }
                Err(e) => {
                    if matches!(e, RedfishError::Unauthorized { .. }) {
                        self.login_failed();
                    }
                    return Err(e);
                }
            };
        }
        Ok(match &*auth {
            Auth::Session { token, .. } => AuthHeader::Token(token.clone()),
            Auth::Basic => AuthHeader::Basic(creds),
            Auth::Unknown => AuthHeader::None,
        })
    }

    pub(super) fn logins(&self) -> std::sync::MutexGuard<'_, Logins> {
        self.logins.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn login_policy(&self) -> LoginPolicy {
        let s = &self.target.settings;
        LoginPolicy {
            max_failed: s.max_failed_logins,
            window: s.failed_login_window,
            backoff: s.login_backoff,
        }
    }

    pub(super) fn login_allowed(&self) -> Result<(), RedfishError> {
        let policy = self.login_policy();
        self.logins()
            .check(std::time::Instant::now(), policy)
            .map_err(|held| RedfishError::LoginHeld {
                bmc: self.target.name.clone(),
                failures: held.failures,
                window_s: policy.window.as_secs(),
                retry_in_s: held.retry_in.as_secs().max(1),
            })
    }

    pub(super) fn login_failed(&self) {
        let policy = self.login_policy();
        let mut l = self.logins();
        l.failed(std::time::Instant::now());
        warn!(bmc = %self.target.name, max_failed = policy.max_failed, window_s = policy.window.as_secs(),
              "login refused (HTTP 401): failed logins to this BMC are bounded; fix its credentials file (it is read again when it changes)");
    }

    /// Reads the credentials file again now (SIGHUP): `Ok(true)` when the
    /// credentials changed (the session made with the old ones is
    /// deleted; the next request logs in with the new ones).
    pub async fn reload_credentials(&self) -> Result<bool, String> {
        let mut auth = self.auth.lock().await;
        let changed = self.logins().refresh(true)?;
        if changed {
            self.end_session(&mut auth).await;
        }
        Ok(changed)
    }

    /// Deletes the session held (best effort: a BMC drops it anyway when
    /// it times out) and forgets how this BMC is authenticated.
    pub(super) async fn end_session(&self, auth: &mut Auth) {
        if let Auth::Session {
            token,
            location: Some(location),
        } = &*auth
        {
            let header = AuthHeader::Token(token.clone());
            match self
                .attempt(&Method::DELETE, location, None, None, &header)
                .await
            {
                Ok(_) => debug!(bmc = %self.target.name, "session deleted"),
                Err(e) => warn!(bmc = %self.target.name, error = %e, "could not delete session"),
            }
        }
        *auth = Auth::Unknown;
    }

    pub(super) async fn open_session(&self, creds: &Credentials) -> Result<Auth, RedfishError> {
        if !self.target.settings.sessions {
            return Ok(Auth::Basic);
        }
        // Boxed: root() → request → auth → open_session → root() is a cycle
        // the compiler cannot size (at run time root() never authenticates).
        let root = Box::pin(self.root()).await?;
        let Some(sessions) = root.sessions.clone() else {
            debug!(bmc = %self.target.name, "no session service; using basic auth");
            return Ok(Auth::Basic);
        };
        let body = json!({"UserName": creds.username, "Password": creds.password.expose()});
        match self
            .attempt(
                &Method::POST,
                &sessions,
                Some(&body),
                None,
                &AuthHeader::None,
            )
            .await
        {
            Ok(reply) => match reply.token.clone() {
                Some(token) => {
                    debug!(bmc = %self.target.name, "session created");
                    Ok(Auth::Session {
                        token,
                        location: reply
                            .location
                            .map(|l| model::normalize_path(&l, &mut Vec::new(), "session")),
                    })
                }
                None => Ok(Auth::Basic),
            },
            Err(e @ RedfishError::Unauthorized { .. }) => Err(e),
            Err(e @ RedfishError::UntrustedCertificate { .. }) => Err(e),
            // A BMC that answers credentials with more than the limit is
            // not one to send them to on every request.
            Err(e @ RedfishError::TooLarge { .. }) => Err(e),
            Err(e) if e.is_transient() && e.status().is_none() => Err(e),
            Err(e) => {
                debug!(bmc = %self.target.name, error = %e, "session refused; using basic auth");
                Ok(Auth::Basic)
            }
        }
    }

    /// How this BMC is authenticated: a session, basic auth, or none.
    pub async fn auth_mode(&self) -> Result<String, RedfishError> {
        Ok(match self.auth_header().await? {
            AuthHeader::None => "none (no credentials given)",
            AuthHeader::Token(_) => "session (X-Auth-Token)",
            AuthHeader::Basic(_) => "basic (no usable session service)",
        }
        .to_owned())
    }

    pub(super) async fn forget_session(&self) {
        *self.auth.lock().await = Auth::Unknown;
    }

    /// Deletes the session, if one was made; BMCs hold few.
    pub async fn close(&self) {
        let mut auth = self.auth.lock().await;
        self.end_session(&mut auth).await;
    }
}
