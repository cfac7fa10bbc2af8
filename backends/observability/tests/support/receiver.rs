//! A small OTLP/HTTP receiver on 127.0.0.1: a hand-written HTTP/1.1 server over a tokio
//! `TcpListener` that records every request and answers with a chosen status.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Header names in lower case, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    /// The value of a header (names are compared case-insensitively); fails when it appears
    /// more than once.
    pub fn header(&self, name: &str) -> Option<&str> {
        let mut values = self
            .headers
            .iter()
            .filter(|(key, _)| key.eq_ignore_ascii_case(name));
        let value = values.next().map(|(_, value)| value.as_str());
        assert!(values.next().is_none(), "header {name} sent twice");
        value
    }

    /// The body decoded with the official OTLP protobuf definitions.
    pub fn decode(&self) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest::decode(self.body.as_slice())
            .expect("the body is an OTLP ExportTraceServiceRequest")
    }
}

/// How the receiver answers.
#[derive(Clone)]
pub struct Behaviour {
    /// The status of every answer.
    pub status: u16,
    /// When set, each answer waits for one permit: requests are held until the test
    /// releases them.
    pub gate: Option<Arc<Semaphore>>,
}

impl Behaviour {
    pub fn status(status: u16) -> Self {
        Behaviour { status, gate: None }
    }
}

/// A running receiver; stopped when dropped.
pub struct Receiver {
    address: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    /// How many requests have arrived (before they are answered).
    arrived: watch::Receiver<usize>,
    /// How many answers have been written.
    answered: watch::Receiver<usize>,
    task: JoinHandle<()>,
}

impl Receiver {
    /// Starts a receiver on a free port of 127.0.0.1.
    pub async fn start(behaviour: Behaviour) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let address = listener.local_addr().expect("local address");
        let received = Arc::new(Mutex::new(Vec::new()));
        let (arrived_sender, arrived) = watch::channel(0);
        let (answered_sender, answered) = watch::channel(0);
        let arrived_sender = Arc::new(arrived_sender);
        let answered_sender = Arc::new(answered_sender);
        let task = {
            let received = Arc::clone(&received);
            tokio::spawn(async move {
                let mut connections = tokio::task::JoinSet::new();
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        break;
                    };
                    connections.spawn(serve(
                        stream,
                        behaviour.clone(),
                        Arc::clone(&received),
                        Arc::clone(&arrived_sender),
                        Arc::clone(&answered_sender),
                    ));
                }
            })
        };
        Receiver {
            address,
            received,
            arrived,
            answered,
            task,
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Waits until at least `count` requests have arrived.
    pub async fn wait_for_arrivals(&self, count: usize) {
        let mut arrived = self.arrived.clone();
        arrived
            .wait_for(|n| *n >= count)
            .await
            .expect("receiver running");
    }

    /// How many answers were written.
    pub fn answered(&self) -> usize {
        *self.answered.borrow()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection.
        self.task.abort();
    }
}

async fn serve(
    mut stream: TcpStream,
    behaviour: Behaviour,
    received: Arc<Mutex<Vec<Received>>>,
    arrived: Arc<watch::Sender<usize>>,
    answered: Arc<watch::Sender<usize>>,
) {
    let mut buffer = Vec::new();
    // One connection can carry several requests (keep-alive).
    while let Some(request) = read_request(&mut stream, &mut buffer).await {
        received.lock().unwrap().push(request);
        arrived.send_modify(|n| *n += 1);
        if let Some(gate) = &behaviour.gate {
            let Ok(permit) = gate.acquire().await else {
                return;
            };
            permit.forget();
        }
        let reason = match behaviour.status {
            200 => "OK",
            401 => "Unauthorized",
            _ => "Status",
        };
        let response = format!(
            "HTTP/1.1 {} {reason}\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
            behaviour.status
        );
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
        answered.send_modify(|n| *n += 1);
    }
}

/// Reads one request; `None` at the end of the connection.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Received> {
    let head_end = loop {
        if let Some(position) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break position;
        }
        let mut chunk = [0u8; 4096];
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8(buffer[..head_end].to_vec()).expect("an ASCII request head");
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().expect("a request line").split(' ');
    let method = request_line.next().expect("a method").to_owned();
    let path = request_line.next().expect("a path").to_owned();
    let headers: Vec<(String, String)> = lines
        .map(|line| {
            let (name, value) = line.split_once(':').expect("a header line");
            (name.trim().to_ascii_lowercase(), value.trim().to_owned())
        })
        .collect();
    assert!(
        !headers.iter().any(|(name, _)| name == "transfer-encoding"),
        "the exporter is expected to send a content-length"
    );
    let length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .map(|(_, value)| value.parse().expect("a numeric content-length"))
        .unwrap_or(0);
    buffer.drain(..head_end + 4);
    while buffer.len() < length {
        let mut chunk = [0u8; 4096];
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    let body: Vec<u8> = buffer.drain(..length).collect();
    Some(Received {
        method,
        path,
        headers,
        body,
    })
}

/// How many spans all requests so far carried.
pub fn spans_received(receiver: &Receiver) -> usize {
    receiver
        .requests()
        .iter()
        .flat_map(|request| request.decode().resource_spans)
        .flat_map(|resource| resource.scope_spans)
        .map(|scope| scope.spans.len())
        .sum()
}
