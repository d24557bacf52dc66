//! Upstream misbehaviour that a real broker does not produce on demand: a broker
//! that answers with the wrong correlation id, with bytes that do not decode, or
//! that hangs up mid-request. In every case kshim closes the client connection
//! (so that the client retries), keeps running, and keeps answering ApiVersions.
//!
//! The fake broker answers only what kshim's discovery asks (ApiVersions and
//! Metadata) correctly; what it does with forwarded requests is the fault under
//! test. The proof that forwarding works is the interop suite against real Kafka.

mod support;

use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{ApiKey, BrokerId, MetadataResponse};
use kafka_protocol::protocol::StrBytes;
use kshim::client::KafkaClient;
use std::time::Duration;
use support::{api_versions_body, encode, read_frame, start_proxy, write_response, RunningProxy};
use tokio::net::TcpListener;

#[derive(Clone, Copy, Debug)]
enum Fault {
    WrongCorrelationId,
    GarbageMetadata,
    HangUp,
}

/// A broker at `port` that serves discovery properly and forwarded requests with
/// `fault`. Discovery is told apart from forwarded requests by client id.
async fn fake_broker(listener: TcpListener, fault: Fault) {
    let port = listener.local_addr().unwrap().port();
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(async move {
            while let Some(frame) = read_frame(&mut s).await {
                let api = i16::from_be_bytes([frame[0], frame[1]]);
                let version = i16::from_be_bytes([frame[2], frame[3]]);
                let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
                let id_len = i16::from_be_bytes([frame[8], frame[9]]) as usize;
                let from_discovery = &frame[10..10 + id_len] == b"kshim";
                if api == ApiKey::ApiVersions as i16 {
                    let body = api_versions_body(&[(0, 3, 12), (3, 0, 12), (18, 0, 4)], version);
                    write_response(&mut s, correlation_id, false, &body).await;
                    continue;
                }
                let metadata = MetadataResponse::default()
                    .with_brokers(vec![MetadataResponseBroker::default()
                        .with_node_id(BrokerId(1))
                        .with_host(StrBytes::from_static_str("127.0.0.1"))
                        .with_port(i32::from(port))])
                    .with_controller_id(BrokerId(1));
                if from_discovery {
                    write_response(
                        &mut s,
                        correlation_id,
                        version >= 9,
                        &encode(&metadata, version),
                    )
                    .await;
                    continue;
                }
                match fault {
                    Fault::WrongCorrelationId => {
                        write_response(
                            &mut s,
                            correlation_id + 1,
                            version >= 9,
                            &encode(&metadata, version),
                        )
                        .await
                    }
                    Fault::GarbageMetadata => {
                        // A broker list claiming 2^28 entries in a few bytes.
                        write_response(
                            &mut s,
                            correlation_id,
                            version >= 9,
                            &[0, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x01],
                        )
                        .await
                    }
                    Fault::HangUp => return,
                }
            }
        });
    }
}

async fn proxy_in_front_of(fault: Fault) -> RunningProxy {
    let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = upstream.local_addr().unwrap().to_string();
    tokio::spawn(fake_broker(upstream, fault));
    start_proxy(upstream_addr, 200, |c| {
        if let Some(u) = c.upstream.as_mut() {
            u.connect_timeout_ms = 1000;
        }
    })
    .await
}

/// Metadata v12 with no topics, as a client would send it.
fn metadata_body() -> Vec<u8> {
    vec![1, 0, 0, 0]
}

#[tokio::test]
async fn upstream_faults_close_the_client_connection_and_nothing_else() {
    for fault in [
        Fault::WrongCorrelationId,
        Fault::GarbageMetadata,
        Fault::HangUp,
    ] {
        let kshim = proxy_in_front_of(fault).await;
        let addr = kshim.addr.clone();
        let timeout = Duration::from_secs(5);
        let mut client = KafkaClient::connect(&addr, timeout).await.unwrap();
        let (_, discovered) = client.api_versions().await.unwrap();
        assert!(
            discovered
                .apis
                .iter()
                .any(|a| a.api_key == ApiKey::Metadata as i16),
            "{fault:?}: the upstream's table is advertised"
        );
        let err = client
            .request(ApiKey::Metadata, 12, &metadata_body())
            .await
            .expect_err("the connection must close");
        assert!(err.to_string().contains("closed"), "{fault:?}: {err}");
        // kshim itself is fine: a new connection is answered.
        let mut again = KafkaClient::connect(&addr, timeout).await.unwrap();
        let (_, still) = again.api_versions().await.unwrap();
        assert_eq!(still.error_code, 0, "{fault:?}");
        let _ = kshim.stop.send(true);
    }
}
