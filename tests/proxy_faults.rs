//! Upstream misbehaviour that a real broker does not produce on demand: a broker
//! that answers with the wrong correlation id, with bytes that do not decode, or
//! that hangs up mid-request. In every case kshim closes the client connection
//! (so that the client retries), keeps running, and keeps answering ApiVersions.
//!
//! The fake broker (tests/support/fake_broker.rs) answers only what kshim's
//! discovery asks (ApiVersions and Metadata) correctly; what it does with
//! forwarded requests is the fault under test. The proof that forwarding works is the interop suite against real Kafka.

use crate::support;

use kafka_protocol::messages::{ApiKey, MetadataResponse};
use kshim::client::KafkaClient;
use std::time::Duration;
use support::fake_broker::{encode, FakeBroker, Reply};
use support::{start_proxy, RunningProxy};

#[derive(Clone, Copy, Debug)]
enum Fault {
    WrongCorrelationId,
    GarbageMetadata,
    HangUp,
}

/// A broker that serves discovery properly and forwarded requests with `fault`.
/// Discovery is told apart from forwarded requests by client id.
async fn fake_broker(fault: Fault) -> FakeBroker {
    FakeBroker::builder()
        .on_request(move |req| {
            if req.from_discovery() || req.api_key == ApiKey::ApiVersions as i16 {
                return Reply::Default;
            }
            match fault {
                Fault::WrongCorrelationId => Reply::BodyWithCorrelation(
                    req.correlation_id + 1,
                    encode(&MetadataResponse::default(), req.version),
                ),
                // A broker list claiming 2^28 entries in a few bytes.
                Fault::GarbageMetadata => {
                    Reply::Body(vec![0, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x01].into())
                }
                Fault::HangUp => Reply::Close,
            }
        })
        .start()
        .await
}

async fn proxy_in_front_of(fault: Fault) -> (FakeBroker, RunningProxy) {
    let broker = fake_broker(fault).await;
    let proxy = start_proxy(broker.addr.clone(), 200, |c| {
        if let Some(u) = c.upstream.as_mut() {
            u.connect_timeout_ms = 1000;
        }
    })
    .await;
    (broker, proxy)
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
        let (_broker, kshim) = proxy_in_front_of(fault).await;
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
