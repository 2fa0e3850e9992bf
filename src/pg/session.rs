//! Queries over the Postgres protocol: the simple protocol (`Query`) and the extended
//! one (`Parse`, `Bind`, `Describe`, `Execute`, `Sync`), both through the same engine,
//! sandbox, limits and admission as `POST /api/v1/query`.
//!
//! `Parse` plans the statement once (taking a query slot, like any query) to learn its
//! result columns and its placeholders' types, which `Describe` then reports; `Execute`
//! runs it with the bound values. Statements the door answers itself (`BEGIN`, `SET`,
//! `SHOW`) never reach the engine ([`local`](super::local)); catalog queries do
//! ([`PgStatement`]).

use std::fmt::Debug;
use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use async_trait::async_trait;
use bytes::{BufMut, BytesMut};
use futures::sink::Sink;
use futures::{stream, StreamExt, TryStreamExt};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use pgwire::messages::PgWireBackendMessage;
use quiver_query::{PgStatement, QueryAccess, QueryStream, ScalarValue};

use super::cancel::{cancelled_error, Cancel};
use super::encode;
use super::local::{self, Local};
use super::params;
use super::search_path;
use super::startup::database;
use crate::http::AppState;

/// A parsed statement.
#[derive(Debug, Clone)]
pub enum Statement {
    /// Runs on the engine.
    Sql {
        /// The SQL as prepared for the engine, with Postgres's column names.
        prepared: PgStatement,
        /// Its result's columns, as planned at `Parse` (named as Postgres names them).
        schema: SchemaRef,
        /// Its placeholders' types, `$1` first.
        params: Vec<Option<DataType>>,
    },
    /// Answered by the door.
    Local(Local),
}

/// The error a client sees for a failed query, with the SQLSTATE that says what kind.
pub fn query_error(e: &quiver_query::Error) -> ErrorInfo {
    use quiver_query::Error as E;
    let code = match e {
        E::Refused(_) => "0A000",            // feature_not_supported
        E::Sql(_) => "42000",                // syntax_error_or_access_rule_violation
        E::Timeout { .. } => "57014",        // query_canceled
        E::ResourcesExhausted(_) => "53200", // out_of_memory
        E::Busy { .. } => "53000",           // insufficient_resources
        E::StoreUnavailable(_) => "58030",   // io_error
        E::Unavailable(_) => "58000",        // system_error (another node unreachable)
        E::Internal(_) => "XX000",
    };
    ErrorInfo::new("ERROR".to_string(), code.to_string(), e.to_string())
}

fn user_error(code: &str, message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_string(),
        code.to_string(),
        message,
    )))
}

fn engine_error(e: quiver_query::Error) -> PgWireError {
    PgWireError::UserError(Box::new(query_error(&e)))
}

fn cancel<C: ClientInfo>(client: &C) -> PgWireResult<Arc<Cancel>> {
    client
        .session_extensions()
        .get::<Arc<Cancel>>()
        .map(|cancel| Arc::clone(&*cancel))
        .ok_or_else(|| user_error("28000", "the connection is not authenticated".into()))
}

/// What the connection may read now: its token is checked again at every statement, so
/// a token revoked (or narrowed to other databases) while a session is open stops that
/// session's next statement, as a revoked role stops a Postgres session's.
fn access<C: ClientInfo>(app: &AppState, client: &C) -> PgWireResult<Arc<QueryAccess>> {
    let at_startup = client
        .session_extensions()
        .get::<QueryAccess>()
        .ok_or_else(|| user_error("28000", "the connection is not authenticated".into()))?;
    let Some(token) = client.session_extensions().get::<SessionToken>() else {
        return Ok(at_startup);
    };
    let database = super::startup::database(client);
    match app
        .auth
        .check_hash(&token.0, crate::auth::Permission::Read)
        .and_then(|grant| grant.database(&database).map(|()| grant))
    {
        Ok(grant) => Ok(Arc::new(grant.query_access().with_pg_catalog())),
        Err(_) => {
            metrics::counter!("quiver_pg_revoked_sessions_total").increment(1);
            Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                "FATAL".to_string(),
                "28000".to_string(),
                "the token this session logged in with was revoked or no longer reads this \
                 database; connect again with a valid token"
                    .to_string(),
            ))))
        }
    }
}

/// The SHA-256 (hex) of the token a session logged in with, kept to check it again at
/// every statement (a SCRAM login never sees the token itself).
pub struct SessionToken(pub String);

/// Parses statements for the extended protocol.
pub struct Parser {
    app: AppState,
}

#[async_trait]
impl QueryParser for Parser {
    type Statement = Statement;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        if let Some(local) = local::classify(sql) {
            return Ok(Some(Statement::Local(local)));
        }
        let access = access(&self.app, client)?;
        let database = database(client);
        let prepared = PgStatement::prepare(&search_path::expand(sql, &database));
        let described = self
            .app
            .query
            .describe_as(&database, &prepared.sql, None, &access)
            .await
            .map_err(engine_error)?;
        Ok(Some(Statement::Sql {
            schema: prepared.rename(&described.schema).into_owned(),
            prepared,
            params: described.params,
        }))
    }

    fn get_parameter_types(&self, statement: &Statement) -> PgWireResult<Vec<Type>> {
        Ok(match statement {
            Statement::Sql { params: types, .. } => types
                .iter()
                .map(|t| params::described_type(t.as_ref()))
                .collect(),
            Statement::Local(_) => vec![],
        })
    }

    fn get_result_schema(
        &self,
        statement: &Statement,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        let format = format.cloned().unwrap_or_default();
        Ok(match statement {
            Statement::Sql { schema, .. } => encode::fields(schema, &format),
            Statement::Local(local) => local_fields(local, &format),
        })
    }
}

/// A `SHOW` answer's one text column, named after the setting as in Postgres.
fn local_fields(local: &Local, format: &Format) -> Vec<FieldInfo> {
    match local {
        Local::Show(name, _) => vec![FieldInfo::new(
            name.clone(),
            None,
            None,
            Type::TEXT,
            format.format_for(0),
        )],
        Local::Begin | Local::End(_) | Local::Command(_) => Vec::new(),
    }
}

/// Both query protocols of one door.
pub struct Session {
    app: AppState,
    parser: Arc<Parser>,
}

impl Session {
    pub fn new(app: AppState) -> Self {
        Session {
            parser: Arc::new(Parser { app: app.clone() }),
            app,
        }
    }

    /// Runs `sql` (with `params` bound) and streams its rows in `format`, until done or
    /// cancelled.
    async fn run(
        &self,
        database: &str,
        access: &QueryAccess,
        prepared: &PgStatement,
        params: Option<Vec<ScalarValue>>,
        format: &Format,
        cancel: &Cancel,
    ) -> PgWireResult<Response> {
        let started = std::time::Instant::now();
        let start = self
            .app
            .query
            .execute_stream_as(database, &prepared.sql, params, access);
        let stream = tokio::select! {
            stream = start => stream.map_err(engine_error)?,
            () = cancel.cancelled() => return Err(cancelled_error()),
        };
        let schema = stream.schema();
        let fields = Arc::new(encode::fields(&prepared.rename(&schema), format));
        metrics::counter!("quiver_pg_queries_total").increment(1);
        Ok(Response::Query(QueryResponse::new(
            Arc::clone(&fields),
            rows(stream, fields, started, cancel.cancelled()),
        )))
    }

    /// Answers a statement the door handles itself.
    fn local(local: &Local, database: &str, format: &Format) -> Response {
        let value = match local {
            Local::Begin => return Response::TransactionStart(Tag::new("BEGIN")),
            Local::End(tag) => return Response::TransactionEnd(Tag::new(tag)),
            Local::Command(tag) => return Response::Execution(Tag::new(tag)),
            Local::Show(..) => local.show_value(database).unwrap_or_default(),
        };
        let fields = Arc::new(local_fields(local, format));
        let mut buf = BytesMut::new();
        buf.put_i32(value.len() as i32);
        buf.put_slice(value.as_bytes());
        let row: PgWireResult<DataRow> = Ok(DataRow::new(buf, 1));
        let mut response = QueryResponse::new(fields, stream::iter(vec![row]));
        response.set_command_tag("SHOW");
        Response::Query(response)
    }
}

/// The rows of a running query, encoded batch by batch as the client reads them.
/// A cancel request ends it with `57014`; dropping it stops the query.
fn rows(
    stream: QueryStream,
    fields: Arc<Vec<FieldInfo>>,
    started: std::time::Instant,
    cancelled: impl std::future::Future<Output = ()> + Send + 'static,
) -> impl futures::Stream<Item = PgWireResult<DataRow>> + Send + 'static {
    let was_cancelled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = Arc::clone(&was_cancelled);
    let cancelled = async move {
        cancelled.await;
        flag.store(true, std::sync::atomic::Ordering::Release);
    };
    let done = stream::once(async move {
        if was_cancelled.load(std::sync::atomic::Ordering::Acquire) {
            return Err(cancelled_error());
        }
        metrics::histogram!("quiver_query_seconds").record(started.elapsed().as_secs_f64());
        Ok::<_, PgWireError>(stream::iter(Vec::<PgWireResult<DataRow>>::new()))
    });
    stream
        .take_until(cancelled)
        .map(move |batch| {
            let batch = batch.map_err(engine_error)?;
            let rows = encode::rows(&batch, &fields).map_err(|e| user_error("XX000", e))?;
            let rows: Vec<PgWireResult<DataRow>> = rows.into_iter().map(Ok).collect();
            Ok(stream::iter(rows))
        })
        .chain(done)
        .try_flatten()
}

#[async_trait]
impl SimpleQueryHandler for Session {
    async fn do_query<C>(&self, client: &mut C, sql: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let database = database(client);
        let access = access(&self.app, client)?;
        let cancel = cancel(client)?;
        let statements = quiver_query::split_statements(sql);
        if statements.len() > 1 {
            return Ok(self.several(&statements, &database, &access, &cancel).await);
        }
        let format = Format::UnifiedText;
        let response = match local::classify(sql) {
            Some(local) => Ok(Self::local(&local, &database, &format)),
            None => {
                let prepared = PgStatement::prepare(&search_path::expand(sql, &database));
                self.run(&database, &access, &prepared, None, &format, &cancel)
                    .await
            }
        };
        Ok(vec![response.unwrap_or_else(error_response)])
    }
}

impl Session {
    /// The answers to a simple query of several statements, in order, as Postgres
    /// gives them: each statement is planned here (its columns are sent before its
    /// rows) and runs only when the client has read the ones before it, so a batch
    /// holds one query slot at a time however many statements it has. The first that
    /// fails to plan answers its error and the rest are not run.
    async fn several(
        &self,
        statements: &[&str],
        database: &str,
        access: &Arc<QueryAccess>,
        cancel: &Arc<Cancel>,
    ) -> Vec<Response> {
        let format = Format::UnifiedText;
        let mut responses = Vec::with_capacity(statements.len());
        for statement in statements {
            if let Some(local) = local::classify(statement) {
                responses.push(Self::local(&local, database, &format));
                continue;
            }
            let prepared = PgStatement::prepare(&search_path::expand(statement, database));
            let described = match self
                .app
                .query
                .describe_as(database, &prepared.sql, None, access)
                .await
            {
                Ok(described) => described,
                Err(e) => {
                    responses.push(error_response(engine_error(e)));
                    break;
                }
            };
            let fields = Arc::new(encode::fields(&prepared.rename(&described.schema), &format));
            let (engine, database, access, cancel) = (
                self.app.query.clone(),
                database.to_string(),
                Arc::clone(access),
                Arc::clone(cancel),
            );
            let encoded = Arc::clone(&fields);
            let rows_when_read = stream::once(async move {
                let started = std::time::Instant::now();
                let start = engine.execute_stream_as(&database, &prepared.sql, None, &access);
                let stream = tokio::select! {
                    stream = start => stream.map_err(engine_error)?,
                    () = cancel.cancelled() => return Err(cancelled_error()),
                };
                metrics::counter!("quiver_pg_queries_total").increment(1);
                Ok(rows(stream, encoded, started, cancel.cancelled()))
            })
            .try_flatten();
            responses.push(Response::Query(QueryResponse::new(fields, rows_when_read)));
        }
        responses
    }
}

/// A failed statement as the response the client reads (the connection stays open).
fn error_response(e: PgWireError) -> Response {
    match e {
        PgWireError::UserError(info) => Response::Error(info),
        other => Response::Error(Box::new(ErrorInfo::new(
            "ERROR".into(),
            "XX000".into(),
            other.to_string(),
        ))),
    }
}

#[async_trait]
impl ExtendedQueryHandler for Session {
    type Statement = Statement;
    type QueryParser = Parser;

    fn query_parser(&self) -> Arc<Parser> {
        Arc::clone(&self.parser)
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let database = database(client);
        let access = access(&self.app, client)?;
        let cancel = cancel(client)?;
        match &portal.statement.statement {
            Statement::Local(local) => {
                Ok(Self::local(local, &database, &portal.result_column_format))
            }
            Statement::Sql {
                prepared,
                params: targets,
                ..
            } => {
                let types: Vec<Type> = (0..portal.parameters.len())
                    .map(|i| {
                        portal
                            .statement
                            .parameter_types
                            .get(i)
                            .cloned()
                            .flatten()
                            .filter(|t| *t != Type::UNKNOWN)
                            .unwrap_or_else(|| {
                                params::described_type(targets.get(i).and_then(Option::as_ref))
                            })
                    })
                    .collect();
                let values = params::decode(
                    &portal.parameters,
                    &portal.parameter_format,
                    &types,
                    targets,
                )
                .map_err(|e| user_error("22P02", e))?;
                let values = (!values.is_empty()).then_some(values);
                self.run(
                    &database,
                    &access,
                    prepared,
                    values,
                    &portal.result_column_format,
                    &cancel,
                )
                .await
            }
        }
    }
}
