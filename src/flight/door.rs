//! The gRPC service the listener serves: Flight SQL, with InfluxDB 3's JSON tickets
//! taken aside first.
//!
//! arrow-flight's Flight SQL dispatch decodes every `DoGet` ticket as a protobuf
//! command and would refuse InfluxDB 3's JSON before the door saw it, so this wrapper
//! looks at the ticket and hands everything else to Flight SQL unchanged.

use std::sync::Arc;

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, PollInfo,
    SchemaResult, Ticket,
};
use tonic::{Request, Response, Status, Streaming};

use super::service::Service;
use super::ticket;

/// Flight SQL plus InfluxDB 3's tickets.
pub struct Door {
    sql: Arc<Service>,
}

impl Door {
    /// The door in front of `sql`.
    pub fn new(sql: Arc<Service>) -> Door {
        Door { sql }
    }
}

#[tonic::async_trait]
impl FlightService for Door {
    type HandshakeStream = <Service as FlightService>::HandshakeStream;
    type ListFlightsStream = <Service as FlightService>::ListFlightsStream;
    type DoGetStream = <Service as FlightService>::DoGetStream;
    type DoPutStream = <Service as FlightService>::DoPutStream;
    type DoActionStream = <Service as FlightService>::DoActionStream;
    type ListActionsStream = <Service as FlightService>::ListActionsStream;
    type DoExchangeStream = <Service as FlightService>::DoExchangeStream;

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        match ticket::influx(&request.get_ref().ticket) {
            Some(query) => self.sql.do_get_influx(query?, request).await,
            None => self.sql.do_get(request).await,
        }
    }

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        self.sql.handshake(request).await
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        self.sql.list_flights(request).await
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.sql.get_flight_info(request).await
    }

    async fn poll_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        self.sql.poll_flight_info(request).await
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        self.sql.get_schema(request).await
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        self.sql.do_put(request).await
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        self.sql.do_action(request).await
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        self.sql.list_actions(request).await
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        self.sql.do_exchange(request).await
    }
}
