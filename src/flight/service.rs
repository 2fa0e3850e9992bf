//! Flight SQL over the engine: statements, prepared statements and the catalog.
//!
//! A statement is planned at `GetFlightInfo` (so bad SQL fails there, and the client
//! learns the result's schema) and run at `DoGet`, whose ticket names the database and
//! the SQL ([`ticket::Statement`]). Both calls are authenticated; each `DoGet` is one
//! query under the engine's limits, its batches sent as the client reads them, and
//! dropping the call (client gone, gRPC deadline) stops the query.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use arrow::datatypes::Schema;
use arrow::record_batch::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::{SqlInfoData, XdbcTypeInfoData};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionCancelQueryRequest, ActionCancelQueryResult, ActionClosePreparedStatementRequest,
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, CommandGetCatalogs,
    CommandGetDbSchemas, CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables,
    CommandGetXdbcTypeInfo, CommandPreparedStatementQuery, CommandPreparedStatementUpdate,
    CommandStatementQuery, CommandStatementUpdate, DoPutPreparedStatementResult, ProstMessageExt,
    SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    Action, ActionType, CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus,
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, IpcMessage,
    SchemaAsIpc, Ticket,
};
use futures::{stream, Stream, StreamExt, TryStreamExt};
use prost::Message;
use quiver_query::{QueryAccess, ScalarValue};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Request, Response, Status, Streaming};

use super::caller::{self, Caller};
use super::cancel::Running;
use super::metadata;
use super::prepared::{Prepared, Registry, PARAM_ROWS_MAX};
use super::status::{internal, query_status};
use super::ticket::{self, Statement};
use crate::http::AppState;

/// The action type of Flight's `CancelFlightInfo`.
const CANCEL_FLIGHT_INFO: &str = "CancelFlightInfo";

/// Record batches one `DoPut` of parameters may send (empty ones included).
const PARAM_BATCHES_MAX: usize = PARAM_ROWS_MAX;

/// The stream `DoGet` answers with.
pub type DoGetStream = <Service as FlightService>::DoGetStream;

/// The Flight SQL service of one node.
pub struct Service {
    app: AppState,
    prepared: Registry,
    sql_info: SqlInfoData,
    xdbc_types: XdbcTypeInfoData,
    running: Arc<Running>,
}

impl Service {
    /// The service over the node's engine; fails only if the `SqlInfo` table cannot
    /// be built.
    pub fn new(app: AppState) -> Result<Service, FlightError> {
        let sql_info = metadata::sql_info(app.query.config().timeout_ms)?;
        Ok(Service {
            app,
            prepared: Registry::default(),
            sql_info,
            xdbc_types: super::xdbc::xdbc_type_info()?,
            running: Arc::default(),
        })
    }

    /// Cancels the runs of every ticket `info` holds; whether any was running.
    fn cancel(&self, info: &FlightInfo) -> bool {
        let mut any = false;
        for endpoint in &info.endpoint {
            let Some(ticket) = &endpoint.ticket else {
                continue;
            };
            let Ok(any_message) = arrow_flight::sql::Any::decode(ticket.ticket.clone()) else {
                continue;
            };
            let name = if let Ok(Some(t)) = any_message.unpack::<TicketStatementQuery>() {
                Statement::decode(&t.statement_handle)
                    .ok()
                    .and_then(|s| s.run)
            } else if let Ok(Some(p)) = any_message.unpack::<CommandPreparedStatementQuery>() {
                Some(prepared_run_name(&p.prepared_statement_handle))
            } else {
                None
            };
            if let Some(name) = name {
                any |= self.running.cancel(&name);
            }
        }
        any
    }

    fn caller(&self, metadata: &MetadataMap) -> Result<Caller, Status> {
        Caller::check(&self.app, metadata)
    }

    /// Runs `sql` against `database` (once per row of `params` when rows are bound,
    /// the answers one after another) and streams its batches as Flight data; a run
    /// named `name` (its ticket's) ends with `CANCELLED` when a client cancels it.
    async fn run(
        &self,
        database: &str,
        access: &QueryAccess,
        sql: &str,
        params: Option<Vec<Vec<ScalarValue>>>,
        name: Option<String>,
    ) -> Result<Response<DoGetStream>, Status> {
        let guard = match name {
            Some(name) => Some(self.running.start(&name).ok_or_else(cancelled_status)?),
            None => None,
        };
        let started = Instant::now();
        metrics::counter!("quiver_flight_queries_total").increment(1);
        let mut rows = params.unwrap_or_default().into_iter();
        let first = self
            .app
            .query
            .execute_stream_as(database, sql, rows.next(), access)
            .await
            .map_err(|e| query_status(&e))?;
        let schema = first.schema();
        // Each further row's query starts when the one before has been read to its end:
        // one query slot at a time, in the order the rows were bound.
        let (engine, database, sql, access) = (
            self.app.query.clone(),
            database.to_string(),
            sql.to_string(),
            access.clone(),
        );
        let rest = stream::iter(rows)
            .then(move |row| {
                let (engine, database, sql, access) = (
                    engine.clone(),
                    database.clone(),
                    sql.clone(),
                    access.clone(),
                );
                async move {
                    engine
                        .execute_stream_as(&database, &sql, Some(row), &access)
                        .await
                }
            })
            .try_flatten();
        let stream = first.chain(rest);
        // The query's time is recorded when its last batch has been taken.
        let finished = stream::once(async move {
            metrics::histogram!("quiver_query_seconds").record(started.elapsed().as_secs_f64());
        })
        .filter_map(|()| async { None });
        let batches = stream
            .map_err(|e| FlightError::Tonic(Box::new(query_status(&e))))
            .chain(finished);
        let Some(guard) = guard else {
            return Ok(Response::new(encode(schema, batches)));
        };
        // Cancelled: the query's stream is dropped (which stops it) and the client gets
        // CANCELLED, never a result that merely ends early.
        let mut cancelled = guard.cancelled.clone();
        let stop = async move {
            let _ = cancelled.wait_for(|c| *c).await;
        };
        let after = stream::once(async move {
            let was_cancelled = *guard.cancelled.borrow();
            drop(guard);
            was_cancelled.then(|| Err(FlightError::Tonic(Box::new(cancelled_status()))))
        })
        .filter_map(|outcome| async { outcome });
        Ok(Response::new(encode(
            schema,
            batches.take_until(stop).chain(after),
        )))
    }

    /// Answers an InfluxDB 3 JSON ticket (see [`ticket::influx`]).
    pub async fn do_get_influx(
        &self,
        query: ticket::InfluxQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let caller = self.caller(request.metadata())?;
        let database = match query.database {
            Some(database) => database,
            None => caller::database(request.metadata())?,
        };
        let access = caller.access(&database)?;
        metrics::counter!("quiver_flight_influxdb3_tickets_total").increment(1);
        self.run(&database, &access, &query.sql, None, None).await
    }

    /// A `FlightInfo` whose one endpoint's ticket is `ticket`.
    fn flight_info(
        schema: &Schema,
        ticket: Vec<u8>,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let info = FlightInfo::new()
            .try_with_schema(schema)
            .map_err(|e| internal("encoding a schema", e))?
            .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket)))
            .with_descriptor(descriptor);
        Ok(Response::new(info))
    }
}

/// `batches` as Flight data, led by `schema` (sent even when there are no rows).
fn encode(
    schema: arrow::datatypes::SchemaRef,
    batches: impl Stream<Item = Result<RecordBatch, FlightError>> + Send + 'static,
) -> DoGetStream {
    Box::pin(
        FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(batches)
            .map_err(Status::from),
    )
}

/// The status a cancelled run ends with.
fn cancelled_status() -> Status {
    Status::cancelled("the query was cancelled (CancelFlightInfo)")
}

/// The run name of a prepared statement's `DoGet`s.
fn prepared_run_name(handle: &[u8]) -> String {
    format!("prepared:{}", String::from_utf8_lossy(handle))
}

/// One batch as a `DoGet` answer.
fn one_batch(batch: RecordBatch) -> Response<DoGetStream> {
    let schema = batch.schema();
    Response::new(encode(schema, stream::iter([Ok(batch)])))
}

/// An IPC-encoded schema, as `ActionCreatePreparedStatementResult` carries it.
fn schema_bytes(schema: &Schema) -> Result<bytes::Bytes, Status> {
    let options = arrow::ipc::writer::IpcWriteOptions::default();
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &options)
        .try_into()
        .map_err(|e| internal("encoding a schema", e))?;
    Ok(bytes)
}

fn read_only() -> Status {
    Status::unimplemented(
        "Quiver's Flight SQL door is read-only: write through HTTP (line protocol, \
         MessagePack, Prometheus remote write)",
    )
}

type HandshakeStream = Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>;

#[tonic::async_trait]
impl FlightSqlService for Service {
    type FlightService = Service;

    /// Basic authentication as Flight defines it: the password is a Quiver token, and
    /// the answer hands it back as the bearer token for later calls.
    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<HandshakeStream>, Status> {
        self.caller(request.metadata())?;
        let token = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_of)
            .unwrap_or_default();
        let answer = HandshakeResponse {
            protocol_version: 0,
            payload: token.clone().into(),
        };
        let mut response: Response<HandshakeStream> =
            Response::new(Box::pin(stream::iter([Ok(answer)])));
        if !token.is_empty() {
            if let Ok(value) = MetadataValue::try_from(format!("Bearer {token}")) {
                response.metadata_mut().insert("authorization", value);
            }
        }
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let caller = self.caller(request.metadata())?;
        let database = caller::database(request.metadata())?;
        let access = caller.access(&database)?;
        let described = self
            .app
            .query
            .describe_as(&database, &query.query, None, &access)
            .await
            .map_err(|e| query_status(&e))?;
        let handle = Statement::new(database, query.query).encode()?;
        let ticket = TicketStatementQuery {
            statement_handle: handle,
        };
        Self::flight_info(
            &described.schema,
            ticket.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let caller = self.caller(request.metadata())?;
        let statement = Statement::decode(&ticket.statement_handle)?;
        let access = caller.access(&statement.database)?;
        let name = statement.run.clone();
        self.run(&statement.database, &access, &statement.sql, None, name)
            .await
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let caller = self.caller(request.metadata())?;
        let prepared = self.prepared.get(&query.prepared_statement_handle)?;
        caller.access(&prepared.database)?;
        Self::flight_info(
            &prepared.schema,
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let caller = self.caller(request.metadata())?;
        let prepared = self.prepared.get(&query.prepared_statement_handle)?;
        let access = caller.access(&prepared.database)?;
        if prepared.bound.is_none() && !prepared.params.is_empty() {
            return Err(Status::invalid_argument(format!(
                "the statement has {} placeholders and no values were bound",
                prepared.params.len()
            )));
        }
        let name = prepared_run_name(&query.prepared_statement_handle);
        self.run(
            &prepared.database,
            &access,
            &prepared.sql,
            prepared.bound,
            Some(name),
        )
        .await
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let caller = self.caller(request.metadata())?;
        let handle = query.prepared_statement_handle;
        let database = self.prepared.get(&handle)?.database;
        caller.access(&database)?;
        let mut stream = FlightRecordBatchStream::new_from_flight_data(
            request.into_inner().map_err(FlightError::from),
        );
        // The counts bound what a client can make the door hold (empty batches
        // included).
        let mut batches: Vec<RecordBatch> = Vec::new();
        let mut rows = 0usize;
        while let Some(batch) = stream
            .try_next()
            .await
            .map_err(|e| Status::invalid_argument(format!("reading the bound parameters: {e}")))?
        {
            rows += batch.num_rows();
            batches.push(batch);
            if rows > PARAM_ROWS_MAX || batches.len() > PARAM_BATCHES_MAX {
                return Err(Status::invalid_argument(format!(
                    "bind at most {PARAM_ROWS_MAX} rows of parameters in at most \
                     {PARAM_BATCHES_MAX} batches (the query runs once per row)"
                )));
            }
        }
        self.prepared
            .update(&handle, |prepared| prepared.bind(&batches))?;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(handle),
        })
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let caller = self.caller(request.metadata())?;
        let database = caller::database(request.metadata())?;
        let access = caller.access(&database)?;
        let described = self
            .app
            .query
            .describe_as(&database, &query.query, None, &access)
            .await
            .map_err(|e| query_status(&e))?;
        let prepared = Prepared::new(database, query.query, described.schema, described.params);
        let dataset_schema = schema_bytes(&prepared.schema)?;
        let parameter_schema = schema_bytes(&prepared.parameter_schema())?;
        let handle = self.prepared.insert(prepared)?;
        metrics::counter!("quiver_flight_prepared_total").increment(1);
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle,
            dataset_schema,
            parameter_schema,
        })
    }

    async fn do_action_cancel_query(
        &self,
        query: ActionCancelQueryRequest,
        request: Request<Action>,
    ) -> Result<ActionCancelQueryResult, Status> {
        self.caller(request.metadata())?;
        let info = FlightInfo::decode(query.info)
            .map_err(|e| Status::invalid_argument(format!("CancelQuery: not a FlightInfo: {e}")))?;
        // `ActionCancelQueryResult.CancelResult` (not re-exported by arrow-flight):
        // 1 cancelled, 3 not cancellable.
        let result = if self.cancel(&info) { 1 } else { 3 };
        Ok(ActionCancelQueryResult { result })
    }

    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        if request.get_ref().r#type != CANCEL_FLIGHT_INFO {
            return Err(Status::invalid_argument(format!(
                "action {:?} is not one this server takes",
                request.get_ref().r#type
            )));
        }
        self.caller(request.metadata())?;
        let body = request.into_inner().body;
        let info = CancelFlightInfoRequest::decode(body)
            .map_err(|e| Status::invalid_argument(format!("CancelFlightInfo: {e}")))?
            .info
            .ok_or_else(|| Status::invalid_argument("CancelFlightInfo names no FlightInfo"))?;
        let status = if self.cancel(&info) {
            CancelStatus::Cancelled
        } else {
            CancelStatus::NotCancellable
        };
        let result = CancelFlightInfoResult {
            status: status as i32,
        };
        let output = arrow_flight::Result {
            body: result.encode_to_vec().into(),
        };
        Ok(Response::new(Box::pin(stream::iter([Ok(output)]))))
    }

    async fn list_custom_actions(&self) -> Option<Vec<Result<ActionType, Status>>> {
        Some(vec![Ok(ActionType {
            r#type: CANCEL_FLIGHT_INFO.to_string(),
            description: "Cancel the queries of a FlightInfo (CancelFlightInfoRequest)".into(),
        })])
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<(), Status> {
        self.caller(request.metadata())?;
        self.prepared.remove(&query.prepared_statement_handle);
        Ok(())
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(request.metadata())?;
        let schema = query.into_builder().schema();
        Self::flight_info(
            &schema,
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.caller(request.metadata())?;
        Ok(one_batch(metadata::catalogs(query)?))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(request.metadata())?;
        let schema = query.clone().into_builder().schema();
        Self::flight_info(
            &schema,
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let caller = self.caller(request.metadata())?;
        let batch = metadata::db_schemas(query, &self.app.query, &caller.listing_access()).await?;
        Ok(one_batch(batch))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(request.metadata())?;
        let schema = query.clone().into_builder().schema();
        Self::flight_info(
            &schema,
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let caller = self.caller(request.metadata())?;
        let batch = metadata::tables(query, &self.app.query, &caller.listing_access()).await?;
        Ok(one_batch(batch))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(request.metadata())?;
        let schema = query.into_builder().schema();
        Self::flight_info(
            &schema,
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.caller(request.metadata())?;
        Ok(one_batch(metadata::table_types(query)?))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(request.metadata())?;
        let schema = query.clone().into_builder(&self.sql_info).schema();
        Self::flight_info(
            &schema,
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.caller(request.metadata())?;
        let batch = query
            .into_builder(&self.sql_info)
            .build()
            .map_err(|e| internal("answering GetSqlInfo", e))?;
        Ok(one_batch(batch))
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(request.metadata())?;
        let schema = query.into_builder(&self.xdbc_types).schema();
        Self::flight_info(
            &schema,
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.caller(request.metadata())?;
        let batch = query
            .into_builder(&self.xdbc_types)
            .build()
            .map_err(|e| internal("answering GetXdbcTypeInfo", e))?;
        Ok(one_batch(batch))
    }

    async fn do_put_statement_update(
        &self,
        _query: CommandStatementUpdate,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        Err(read_only())
    }

    async fn do_put_prepared_statement_update(
        &self,
        _query: CommandPreparedStatementUpdate,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        Err(read_only())
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

/// The token of a `Bearer` or `Basic` (password) authorization value.
fn bearer_of(value: &str) -> Option<String> {
    let value = value.trim();
    if let Some(token) = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
    {
        return Some(token.trim().to_string());
    }
    let encoded = value
        .strip_prefix("Basic ")
        .or_else(|| value.strip_prefix("basic "))?;
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_, password) = text.split_once(':')?;
    Some(password.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_tokens_come_from_bearer_or_basic_passwords() {
        assert_eq!(bearer_of("Bearer abc").as_deref(), Some("abc"));
        // base64("user:tok")
        assert_eq!(bearer_of("Basic dXNlcjp0b2s=").as_deref(), Some("tok"));
        assert_eq!(bearer_of("Digest x"), None);
    }
}
