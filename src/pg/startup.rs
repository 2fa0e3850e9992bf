//! Startup: the database the client names, and its password checked as a Quiver token.
//!
//! The startup message's `database` selects the Quiver database (`default` when the
//! client names none). With authentication on, the password is a token with `read`
//! permission that may read that database, checked one of two ways, chosen by the
//! `user` name:
//! - the user is a token's id (or `bootstrap`, for the bootstrap token) and that token
//!   has a SCRAM verifier: SCRAM-SHA-256 ([`super::scram`]; over TLS also
//!   SCRAM-SHA-256-PLUS, bound to the door's certificate), so the token never crosses
//!   the connection, TLS or not;
//! - any other user name: a cleartext password, taken as a token whatever the user.
//!
//! With `--auth none` the connection is accepted at once. When the door speaks TLS, a
//! connection that did not negotiate it is refused before any password is asked for.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::sink::{Sink, SinkExt};
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata,
    ServerParameterProvider, StartupHandler,
};
use pgwire::api::{
    ClientInfo, PgWireConnectionState, PidSecretKeyGenerator, RandomPidSecretKeyGenerator,
    METADATA_DATABASE, METADATA_USER,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::startup::{Authentication, PasswordMessageFamily};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use quiver_query::QueryAccess;

use super::cancel::Registry;
use super::scram::{self, Exchange};
use crate::auth::{AuthError, Permission};
use crate::http::AppState;
use quiver_query::SERVER_VERSION;

/// Checks who connects, then sends the session parameters.
pub struct Startup {
    app: AppState,
    cancels: Arc<Registry>,
    keys: RandomPidSecretKeyGenerator,
    /// The door speaks TLS: plain connections are refused.
    tls_required: bool,
    /// The certificate's channel-binding value: SCRAM-SHA-256-PLUS is offered over TLS.
    end_point: Option<Arc<[u8]>>,
}

impl Startup {
    pub fn new(
        app: AppState,
        cancels: Arc<Registry>,
        tls_required: bool,
        end_point: Option<Arc<[u8]>>,
    ) -> Self {
        Startup {
            app,
            cancels,
            keys: RandomPidSecretKeyGenerator::default(),
            tls_required,
            end_point,
        }
    }

    /// The channel-binding value this connection is offered: only over TLS.
    fn end_point<C: ClientInfo>(&self, client: &C) -> Option<&[u8]> {
        self.end_point.as_deref().filter(|_| client.is_secure())
    }
}

/// The database of a connection, as its startup message named it.
pub fn database<C: ClientInfo>(client: &C) -> String {
    client
        .metadata()
        .get(METADATA_DATABASE)
        .filter(|d| !d.is_empty())
        .cloned()
        .unwrap_or_else(|| "default".to_string())
}

fn fatal(code: &str, message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".to_string(),
        code.to_string(),
        message,
    )))
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                if self.tls_required && !client.is_secure() {
                    metrics::counter!("quiver_pg_plaintext_refused_total").increment(1);
                    return Err(fatal(
                        "28000",
                        "this server accepts TLS connections only: connect with sslmode=require"
                            .to_string(),
                    ));
                }
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                let database = database(client);
                if let Err(e) = quiver_storage::validate_database_name(&database) {
                    return Err(fatal("3D000", format!("database {database:?}: {e}")));
                }
                if self.app.auth.enabled() {
                    client.set_state(PgWireConnectionState::AuthenticationInProgress);
                    let user = client.metadata().get(METADATA_USER).cloned();
                    let scram = user.and_then(|u| self.app.auth.scram_login(&u));
                    let ask = match scram {
                        Some(login) => {
                            client.session_extensions().insert(Exchange::Offered(login));
                            Authentication::SASL(scram::mechanisms(self.end_point(client)))
                        }
                        None => Authentication::CleartextPassword,
                    };
                    client
                        .send(PgWireBackendMessage::Authentication(ask))
                        .await?;
                } else {
                    self.accept(client, QueryAccess::all()).await?;
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(message)
                if client.session_extensions().get::<Exchange>().is_some() =>
            {
                self.on_scram(client, message).await?;
            }
            PgWireFrontendMessage::PasswordMessageFamily(password) => {
                let password = password.into_password()?;
                let database = database(client);
                let grant = self
                    .app
                    .auth
                    .check_token(Some(&password.password), Permission::Read)
                    .and_then(|grant| grant.database(&database).map(|()| grant));
                match grant {
                    Ok(grant) => {
                        client
                            .session_extensions()
                            .insert(super::session::SessionToken(crate::auth::hash(
                                &password.password,
                            )));
                        self.accept(client, grant.query_access()).await?
                    }
                    Err(AuthError::Unauthenticated) => {
                        metrics::counter!("quiver_pg_auth_failures_total").increment(1);
                        return Err(fatal(
                            "28P01",
                            "password authentication failed: the password must be a Quiver token"
                                .to_string(),
                        ));
                    }
                    Err(AuthError::Forbidden) => {
                        return Err(fatal(
                            "42501",
                            format!("the token may not read database {database:?}"),
                        ))
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl Startup {
    /// One step of a SCRAM exchange: the client's first message answered with the
    /// server's, or its final one checked and the connection accepted.
    async fn on_scram<C>(&self, client: &mut C, message: PasswordMessageFamily) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let Some(exchange) = client.session_extensions().get::<Exchange>() else {
            return Err(fatal("08P01", "no SCRAM exchange is under way".to_string()));
        };
        match &*exchange {
            Exchange::Offered(login) => {
                let first = message.into_sasl_initial_response()?;
                let data = first.data.as_deref().unwrap_or_default();
                let (server_first, challenge) = scram::client_first(
                    login.clone(),
                    &first.auth_method,
                    data,
                    self.end_point(client),
                )
                .map_err(|e| scram_failed(client, &e))?;
                client
                    .session_extensions()
                    .insert(Exchange::Challenged(challenge));
                client
                    .send(PgWireBackendMessage::Authentication(
                        Authentication::SASLContinue(server_first.into_bytes().into()),
                    ))
                    .await?;
            }
            Exchange::Challenged(challenge) => {
                let last = message.into_sasl_response()?;
                let server_final = scram::client_final(challenge, &last.data)
                    .map_err(|e| scram_failed(client, &e))?;
                let database = database(client);
                let sha256 = challenge.login.token_sha256.clone();
                let grant = self
                    .app
                    .auth
                    .check_hash(&sha256, Permission::Read)
                    .and_then(|grant| grant.database(&database).map(|()| grant))
                    .map_err(|e| refused(e, &database))?;
                client
                    .send(PgWireBackendMessage::Authentication(
                        Authentication::SASLFinal(server_final.into_bytes().into()),
                    ))
                    .await?;
                metrics::counter!("quiver_pg_scram_logins_total").increment(1);
                client
                    .session_extensions()
                    .insert(super::session::SessionToken(sha256));
                self.accept(client, grant.query_access()).await?;
            }
        }
        Ok(())
    }

    async fn accept<C>(&self, client: &mut C, access: QueryAccess) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // Postgres clients also find `pg_catalog`, over the databases the token reads.
        client.session_extensions().insert(access.with_pg_catalog());
        let (pid, secret_key) = self.keys.generate(client);
        // A cancel request names this pair; the registration ends with the connection.
        let (cancel, registration) = self.cancels.register(pid, &secret_key);
        client.set_pid_and_secret_key(pid, secret_key);
        client.session_extensions().insert(cancel);
        client.session_extensions().insert(registration);
        metrics::counter!("quiver_pg_connections_total").increment(1);
        finish_authentication(client, &Parameters).await
    }
}

/// A failed SCRAM exchange, as Postgres reports one (`28P01`), counted with the
/// cleartext failures.
fn scram_failed<C: ClientInfo>(client: &C, e: &scram::ScramError) -> PgWireError {
    metrics::counter!("quiver_pg_auth_failures_total").increment(1);
    let user = client
        .metadata()
        .get(METADATA_USER)
        .cloned()
        .unwrap_or_default();
    tracing::debug!(%user, error = %e, "pg SCRAM login refused");
    fatal(
        "28P01",
        format!("password authentication failed for user {user:?}: {e}"),
    )
}

/// A token that authenticated but may not read `database` (or was revoked meanwhile).
fn refused(e: AuthError, database: &str) -> PgWireError {
    match e {
        AuthError::Unauthenticated => {
            metrics::counter!("quiver_pg_auth_failures_total").increment(1);
            fatal(
                "28P01",
                "password authentication failed: the token was revoked".to_string(),
            )
        }
        AuthError::Forbidden => fatal(
            "42501",
            format!("the token may not read database {database:?}"),
        ),
    }
}

/// The session parameters a client learns at startup.
struct Parameters;

impl ServerParameterProvider for Parameters {
    fn server_parameters<C: ClientInfo>(&self, client: &C) -> Option<HashMap<String, String>> {
        let mut params = HashMap::new();
        for (key, value) in [
            ("server_version", SERVER_VERSION),
            ("server_encoding", "UTF8"),
            ("client_encoding", "UTF8"),
            ("DateStyle", "ISO, YMD"),
            ("IntervalStyle", "postgres"),
            ("TimeZone", "UTC"),
            ("integer_datetimes", "on"),
            ("standard_conforming_strings", "on"),
            ("is_superuser", "off"),
            ("in_hot_standby", "off"),
            ("default_transaction_read_only", "on"),
        ] {
            params.insert(key.to_string(), value.to_string());
        }
        params.insert("search_path".to_string(), database(client));
        if let Some(name) = client.metadata().get("application_name") {
            params.insert("application_name".to_string(), name.clone());
        }
        Some(params)
    }
}
