//! Every bounded decoder kshim applies to bytes from the network: the header
//! peek, the request header, the request bodies it answers, and the ApiVersions
//! answer decoder used by the client. They must return errors, never panic, and
//! never allocate in proportion to a length field they have not checked.
//!
//! The input is read both as a frame without its size prefix and, past its first
//! four bytes, as a frame with one, so that `protocol-fixtures/*.bin` work as seeds.

#![no_main]

use bytes::Bytes;
use kshim::protocol::{api_versions, requests, HeaderPeek, RequestFrame};
use libfuzzer_sys::fuzz_target;

fn bodies(body: &[u8]) {
    for version in 0..=2 {
        let _ = requests::update_features(version, body);
        let _ = requests::describe_cluster(version, body);
    }
    for version in 0..=13 {
        let _ = requests::metadata(version, body);
    }
    for version in 0..=api_versions::MAX_VERSION {
        let _ = api_versions::parse_request(version, body);
        let _ = api_versions::decode_response(version, body);
    }
}

fn frame(data: &[u8]) {
    let _ = HeaderPeek::parse(data);
    if let Ok(request) = RequestFrame::parse(Bytes::copy_from_slice(data)) {
        let version = request.header.api_version;
        let body = request.body();
        match request.header.api_key {
            18 => {
                let _ = api_versions::parse_request(version, body);
            }
            57 => {
                let _ = requests::update_features(version, body);
            }
            3 => {
                let _ = requests::metadata(version, body);
            }
            60 => {
                let _ = requests::describe_cluster(version, body);
            }
            _ => {}
        }
    }
}

fuzz_target!(|data: &[u8]| {
    bodies(data);
    frame(data);
    if let Some(rest) = data.get(4..) {
        frame(rest);
        // An answer frame: size prefix and correlation id, then the body.
        if let Some(body) = rest.get(4..) {
            for version in 0..=api_versions::MAX_VERSION {
                let _ = api_versions::decode_response(version, body);
            }
        }
    }
});
