//! What every login exchange shares (features vault, consul): a
//! [`TokenExchange`] that trades an identity token for a server's token and
//! keeps it working. The core ([`Login`]) decides; a [`Server`] says only
//! what is its server's: its calls (login, renew, look up, revoke), their
//! request and response shapes, and its words for a refusal.
//!
//! | when | what the core does |
//! |---|---|
//! | start, or a secret to derive | [`Server::login`] |
//! | two thirds of the token's life have passed (and at least `min_ttl` before it ends), or the identity is re-signed | [`Server::renew`], where the server's tokens renew ([`Server::RENEW`]); a new login when the renewal is refused or leaves less than `min_ttl` (if that login fails while the old token still lives, the old one is kept and the login tried again within its life); a new login where tokens do not renew |
//! | a restore, the saved token derived from the identity in use | [`Server::look_up`]: kept if it lives at least `min_ttl` more; a new login if the server refused it, it was minted by another configuration, or it is about to end; renewed if the server gave no life for it |
//! | a token was replaced, or the allocation ended | [`Server::revoke`]; a token the server no longer knows counts as revoked |

mod builder;
mod reach;

use std::time::Duration;

use crate::manager::{
    Derived, EventKind, ExchangeError, IdentityId, IdentityToken, RefreshReason, Refreshed,
};

pub(crate) use builder::{Common, Settings, common_setters};
pub(crate) use reach::{Reach, Sent};

/// What a login calls with each new token.
pub(crate) type OnToken = dyn Fn(&str, EventKind) + Send + Sync;

/// What a login gets: the server's new token, and its life.
pub(crate) type LoggedIn = (zeroize::Zeroizing<String>, Life);

/// How long a token lives from the moment it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Life {
    /// Milliseconds left; `None` for a token that never expires.
    pub(crate) left_ms: Option<i64>,
}

/// Why a call made with a token failed.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The server refused the token itself (expired, revoked, deleted,
    /// unknown, not renewable): logging in again is the remedy.
    TokenRefused(String),
    /// Anything else (the network, the server).
    Other(ExchangeError),
}

/// What a server says of a saved token after a restart.
pub(crate) enum Saved {
    /// It lives, this long.
    Alive(Life),
    /// It lives, but the answer gave no life to judge it by (Vault's
    /// `lookup-self` without a numeric `ttl`): renew it to learn it, never
    /// take it as a token that never expires.
    #[cfg_attr(not(feature = "vault"), allow(dead_code))]
    NoLife,
    /// It was minted by another configuration of this server (another
    /// mount, role or auth method): why.
    Foreign(String),
}

/// What is a login's server's own: its calls and its words.
pub(crate) trait Server: Send + Sync {
    /// How logs and errors name the login (`Vault login`).
    const KIND: &'static str;
    /// The call that looks a saved token up (`lookup-self`).
    const LOOK_UP: &'static str;
    /// The call that renews a token (`renew-self`); `None`: the server's
    /// tokens do not renew, and every refresh is a new login.
    const RENEW: Option<&'static str>;
    /// What revoking is called (`revoking`, `logging out`).
    const REVOKING: &'static str;
    /// Until when a token that could not be revoked lives (`its TTL ends`).
    const LIVES_UNTIL: &'static str;

    /// Where its tokens are minted ([`TokenExchange::origin`](crate::manager::TokenExchange::origin)).
    fn origin(&self) -> String;
    /// What it logs in as, for logs (`as role "web"`).
    fn logs_in_as(&self) -> String;
    /// Logs in with `token` at `now_ms`: the new token and its life.
    fn login(&self, token: &IdentityToken, now_ms: i64) -> Result<LoggedIn, ExchangeError>;
    /// Renews `secret`: its new life. Called only where [`Server::RENEW`]
    /// is set.
    fn renew(&self, secret: &str) -> Result<Life, Refusal>;
    /// Looks `secret` up at `now_ms` after a restart.
    fn look_up(&self, secret: &str, now_ms: i64) -> Result<Saved, Refusal>;
    /// Revokes `secret`.
    fn revoke(&self, secret: &str) -> Result<(), Refusal>;
    /// Adds what the login's `Debug` shows of its server (its address and
    /// names; never a secret) to `d`.
    fn debug_fields(&self, d: &mut std::fmt::DebugStruct<'_, '_>) {
        let _ = d;
    }
}

/// A login exchange: the core every login shares, over its [`Server`].
#[derive(Clone)]
pub(crate) struct Login<S> {
    pub(crate) common: Common,
    pub(crate) server: S,
}

impl<S: Server> Login<S> {
    /// The exchange's name.
    pub(crate) fn name(&self) -> &str {
        &self.common.name
    }

    /// The identity it consumes.
    pub(crate) fn identity(&self) -> &IdentityId {
        &self.common.identity
    }

    /// The login's `Debug`, as type `name`: its name, identity and least
    /// TTL, then its server's fields.
    pub(crate) fn debug(&self, f: &mut std::fmt::Formatter<'_>, name: &str) -> std::fmt::Result {
        let mut d = f.debug_struct(name);
        d.field("name", &self.common.name)
            .field("identity", &self.common.identity)
            .field("min_ttl", &self.common.min_ttl);
        self.server.debug_fields(&mut d);
        d.finish_non_exhaustive()
    }

    /// The least life a token must have left to be kept, in ms.
    fn min_ttl_ms(&self) -> i64 {
        i64::try_from(self.common.min_ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// Whether a token with `life` left may be kept.
    fn enough(&self, life: &Life) -> bool {
        life.left_ms.is_none_or(|left| left >= self.min_ttl_ms())
    }

    /// When to look at a token with `life` left at `now_ms` again: two
    /// thirds into it, and no later than `min_ttl` before it ends (unless
    /// its whole life is shorter than that); never for a token that never
    /// expires.
    fn refresh_time(&self, life: &Life, now_ms: i64) -> Option<i64> {
        let left_ms = life.left_ms?;
        let two_thirds = left_ms.saturating_mul(2) / 3;
        let latest = left_ms.saturating_sub(self.min_ttl_ms());
        let wait = if latest >= 1000 {
            two_thirds.min(latest)
        } else {
            two_thirds
        };
        Some(now_ms.saturating_add(wait.max(1000)))
    }

    /// A new login with `token` at `now_ms`.
    pub(crate) fn login(
        &self,
        token: &IdentityToken,
        now_ms: i64,
    ) -> Result<Derived, ExchangeError> {
        let (mut secret, life) = self.server.login(token, now_ms)?;
        Ok(Derived::new(
            std::mem::take(&mut *secret),
            self.refresh_time(&life, now_ms),
        ))
    }

    /// A new login replacing a token, logged with why.
    fn replace(
        &self,
        token: &IdentityToken,
        now_ms: i64,
        why: &str,
    ) -> Result<Refreshed, ExchangeError> {
        log::debug!(
            "{} {:?}: logging in again {}: {why}",
            S::KIND,
            self.common.name,
            self.server.logs_in_as()
        );
        self.login(token, now_ms).map(Refreshed::Replaced)
    }

    /// A token with too little `life` left: replaced, or kept a little
    /// longer (and tried again within its life) if the new login fails.
    fn replace_or_keep(
        &self,
        token: &IdentityToken,
        life: &Life,
        now_ms: i64,
        why: String,
    ) -> Result<Refreshed, ExchangeError> {
        match self.replace(token, now_ms, &why) {
            Ok(new) => Ok(new),
            Err(e) => {
                log::warn!(
                    "{} {:?}: {why}, and logging in again failed: {e}; keeping it for now",
                    S::KIND,
                    self.common.name
                );
                let left = life.left_ms.unwrap_or(0);
                Ok(Refreshed::Kept {
                    refresh_at_ms: Some(now_ms.saturating_add((left / 2).clamp(1000, 30_000))),
                })
            }
        }
    }

    /// [`TokenExchange::exchange`](crate::manager::TokenExchange::exchange): a login now.
    pub(crate) fn exchange(&self, token: &IdentityToken) -> Result<String, ExchangeError> {
        let now_ms = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
        let (mut secret, _) = self.server.login(token, now_ms)?;
        Ok(std::mem::take(&mut *secret))
    }

    /// [`TokenExchange::deliver`](crate::manager::TokenExchange::deliver).
    pub(crate) fn deliver(&self, secret: &str, kind: EventKind) {
        if let Some(f) = &self.common.on_token {
            f(secret, kind);
        }
    }

    /// [`TokenExchange::refresh`](crate::manager::TokenExchange::refresh).
    pub(crate) fn refresh(
        &self,
        secret: &str,
        token: &IdentityToken,
        reason: RefreshReason,
        now_ms: i64,
    ) -> Result<Refreshed, ExchangeError> {
        let (verb, life) = if reason == RefreshReason::Restored {
            // After a restart the saved token is only looked at: renewing
            // one that may be dead would only say so less clearly.
            match self.server.look_up(secret, now_ms) {
                Ok(Saved::Alive(life)) => (S::LOOK_UP, Ok(life)),
                // Not kept: a new login, and the old token revoked once its
                // successor is delivered.
                Ok(Saved::Foreign(why)) => return self.replace(token, now_ms, &why),
                Ok(Saved::NoLife) => match S::RENEW {
                    Some(renew) => {
                        log::debug!(
                            "{} {:?}: {} gave no life for the restored token: renewing it to learn its lease",
                            S::KIND,
                            self.common.name,
                            S::LOOK_UP
                        );
                        (renew, self.server.renew(secret))
                    }
                    None => {
                        let why = format!("{} gave no life for the saved token", S::LOOK_UP);
                        return self.replace(token, now_ms, &why);
                    }
                },
                Err(Refusal::TokenRefused(why)) => {
                    let why = format!("{} refused the saved token: {why}", S::LOOK_UP);
                    return self.replace(token, now_ms, &why);
                }
                Err(Refusal::Other(e)) => return Err(e),
            }
        } else {
            match S::RENEW {
                Some(renew) => (renew, self.server.renew(secret)),
                None => {
                    let why = if reason == RefreshReason::Resigned {
                        "the identity was re-signed"
                    } else {
                        "the token nears its end"
                    };
                    let why = format!("{why} ({} tokens cannot be renewed)", S::KIND);
                    return self.replace(token, now_ms, &why);
                }
            }
        };
        match life {
            Ok(life) if self.enough(&life) => {
                let refresh_at_ms = self.refresh_time(&life, now_ms);
                Ok(if reason == RefreshReason::Restored {
                    Refreshed::Kept { refresh_at_ms }
                } else {
                    Refreshed::Renewed { refresh_at_ms }
                })
            }
            Ok(life) => {
                let why = format!(
                    "after {verb} the token has {} ms left, less than the {} s kept (its end is near)",
                    life.left_ms.unwrap_or(0),
                    self.common.min_ttl.as_secs_f64()
                );
                self.replace_or_keep(token, &life, now_ms, why)
            }
            Err(Refusal::TokenRefused(why)) => {
                self.replace(token, now_ms, &format!("{verb} refused the token: {why}"))
            }
            Err(Refusal::Other(e)) => Err(e),
        }
    }

    /// [`TokenExchange::revoke`](crate::manager::TokenExchange::revoke): a
    /// token the server no longer knows counts as revoked.
    pub(crate) fn revoke(&self, secret: &str) -> Result<(), ExchangeError> {
        match self.server.revoke(secret) {
            Ok(()) => {
                log::debug!("{} {:?}: revoked a token", S::KIND, self.common.name);
                Ok(())
            }
            Err(Refusal::TokenRefused(_)) => {
                log::debug!(
                    "{} {:?}: a token to revoke was already invalid",
                    S::KIND,
                    self.common.name
                );
                Ok(())
            }
            Err(Refusal::Other(e)) => Err(ExchangeError(format!(
                "{} {:?}: {} a token failed (it stays saved and is revoked on a later try; until then it lives until {}): {e}",
                S::KIND,
                self.common.name,
                S::REVOKING,
                S::LIVES_UNTIL
            ))),
        }
    }
}

/// Implements [`TokenExchange`](crate::manager::TokenExchange) and `Debug`
/// for a login type whose field `login` is its [`Login`] core.
macro_rules! login_exchange {
    ($login:ty) => {
        impl std::fmt::Debug for $login {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.login.debug(f, stringify!($login))
            }
        }

        impl $crate::manager::TokenExchange for $login {
            fn name(&self) -> &str {
                self.login.name()
            }
            fn origin(&self) -> String {
                $crate::login::Server::origin(&self.login.server)
            }
            fn identity(&self) -> &$crate::manager::IdentityId {
                self.login.identity()
            }
            fn exchange(
                &self,
                token: &$crate::manager::IdentityToken,
            ) -> std::result::Result<String, $crate::manager::ExchangeError> {
                self.login.exchange(token)
            }
            fn deliver(&self, secret: &str, kind: $crate::manager::EventKind) {
                self.login.deliver(secret, kind)
            }
            fn derive(
                &self,
                token: &$crate::manager::IdentityToken,
                now_ms: i64,
            ) -> std::result::Result<$crate::manager::Derived, $crate::manager::ExchangeError> {
                self.login.login(token, now_ms)
            }
            fn refresh(
                &self,
                secret: &str,
                token: &$crate::manager::IdentityToken,
                reason: $crate::manager::RefreshReason,
                now_ms: i64,
            ) -> std::result::Result<$crate::manager::Refreshed, $crate::manager::ExchangeError>
            {
                self.login.refresh(secret, token, reason, now_ms)
            }
            fn release(&self, secret: &str) {
                if let Err(e) = self.login.revoke(secret) {
                    log::warn!("{e}");
                }
            }
            fn revoke(
                &self,
                secret: &str,
            ) -> std::result::Result<(), $crate::manager::ExchangeError> {
                self.login.revoke(secret)
            }
        }
    };
}
pub(crate) use login_exchange;

/// The default time a whole request may take.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) use tests::check_refusals;
