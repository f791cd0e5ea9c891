//! The kubelet's pod-resources API on this host: which device-plugin
//! devices the kubelet assigned to which pod, so that accordd counts
//! exactly those GPUs and MIG devices as held (and never plans pending
//! work on them or repartitions them).
//!
//! Why this source (docs/kubernetes.md says it for admins): the kubelet is the
//! one that assigns device-plugin devices, and `PodResourcesLister/List`
//! (`k8s.io/kubelet/pkg/apis/podresources/v1`, GA since Kubernetes 1.28)
//! is its supported, read-only monitoring API for exactly this question.
//! The alternatives each miss something: NVML shows processes, not
//! assignments (a pod that holds a GPU and has not started CUDA shows
//! nothing); the Node's status only counts; the device plugin has no query
//! API; the kubelet's checkpoint file is internal and unversioned.
//!
//! One unary gRPC call over HTTP/2 with prior knowledge on the unix socket,
//! by hand: the request is an empty message, and the answer's protobuf is
//! decoded here field by field (unknown fields skipped, as protobuf
//! requires), so the agent needs no protobuf compiler or gRPC framework.
//! Everything read is bounded: the answer (16 MiB, the size upstream's
//! clients allow), the time (a deadline per call), the pods and the IDs
//! (the plausibility limits accordd checks, `accord::hardware::limits`).

use std::path::Path;
use std::time::Duration;

use accord_api::agent::PodDevices;
use bytes::{Bytes, BytesMut};

/// Where the kubelet serves it (`--pod-resources-socket` is not a flag:
/// the kubelet always uses `<root-dir>/pod-resources/kubelet.sock`).
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// The largest answer read (upstream's e2e clients and most monitoring
/// agents allow 16 MiB).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// How long one call may take, connect to last byte.
pub const CALL_DEADLINE: Duration = Duration::from_secs(5);

/// Pods and IDs accepted from the kubelet: accordd's limits, so that what
/// the agent sends is never refused for size.
pub const MAX_PODS: usize = accord::hardware::limits::ASSIGNED_PODS;
pub const MAX_IDS_PER_POD: usize = accord::hardware::limits::IDS_PER_POD;
pub const MAX_ID_BYTES: usize = accord::hardware::limits::DEVICE_ID_BYTES;

/// Resource names whose devices are reported: NVIDIA's device plugin's
/// (`nvidia.com/gpu`, `nvidia.com/mig-…`, renamed shared resources).
const NVIDIA_PREFIX: &str = "nvidia.com/";

#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    #[error("{socket}: cannot connect")]
    Connect {
        socket: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{socket}: HTTP/2")]
    Http2 {
        socket: String,
        #[source]
        source: h2::Error,
    },
    #[error("{socket}: no answer within {}s", CALL_DEADLINE.as_secs())]
    Deadline { socket: String },
    #[error("{socket}: answered HTTP status {status}, not a gRPC answer")]
    HttpStatus { socket: String, status: u16 },
    #[error("{socket}: gRPC status {code}: {message}")]
    Grpc {
        socket: String,
        code: u32,
        message: String,
    },
    #[error("{socket}: answer over {MAX_MESSAGE_BYTES} bytes")]
    TooLarge { socket: String },
    #[error("{socket}: malformed answer: {reason}")]
    Malformed { socket: String, reason: String },
}

/// The devices the kubelet at `socket` has assigned, pod by pod (only pods
/// holding `nvidia.com/…` devices; IDs sorted, each once).
pub async fn list(socket: &Path) -> Result<Vec<PodDevices>, PodResourcesError> {
    let name = socket.display().to_string();
    match tokio::time::timeout(CALL_DEADLINE, call_list(socket, &name)).await {
        Ok(r) => r,
        Err(_) => Err(PodResourcesError::Deadline { socket: name }),
    }
}

async fn call_list(socket: &Path, name: &str) -> Result<Vec<PodDevices>, PodResourcesError> {
    let h2e = |source| PodResourcesError::Http2 {
        socket: name.to_owned(),
        source,
    };
    let io = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|source| PodResourcesError::Connect {
            socket: name.to_owned(),
            source,
        })?;
    let (client, connection) = h2::client::Builder::new()
        .max_header_list_size(64 << 10)
        .handshake::<_, Bytes>(io)
        .await
        .map_err(h2e)?;
    // The connection is driven here; dropped (and closed) with this call.
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let _abort = AbortOnDrop(driver);
    let mut client = client.ready().await.map_err(h2e)?;
    let request = http::Request::builder()
        .method("POST")
        .uri("http://localhost/v1.PodResourcesLister/List")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("a static request");
    let (answer, mut send) = client.send_request(request, false).map_err(h2e)?;
    // One gRPC message: not compressed, length 0 (ListPodResourcesRequest
    // has no fields).
    send.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .map_err(h2e)?;
    let answer = answer.await.map_err(h2e)?;
    let status = answer.status();
    let headers = answer.headers().clone();
    if status != http::StatusCode::OK {
        return Err(PodResourcesError::HttpStatus {
            socket: name.to_owned(),
            status: status.as_u16(),
        });
    }
    let mut body = answer.into_body();
    let mut buf = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(h2e)?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if buf.len() + chunk.len() > MAX_MESSAGE_BYTES + 5 {
            return Err(PodResourcesError::TooLarge {
                socket: name.to_owned(),
            });
        }
        buf.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.map_err(h2e)?;
    // A "trailers-only" answer carries the status in its headers.
    let grpc = trailers.as_ref().unwrap_or(&headers);
    let code = grpc
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u32>().ok());
    match code {
        Some(0) => {}
        Some(code) => {
            let message = grpc
                .get("grpc-message")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .chars()
                .take(200)
                .collect();
            return Err(PodResourcesError::Grpc {
                socket: name.to_owned(),
                code,
                message,
            });
        }
        None => {
            return Err(PodResourcesError::Malformed {
                socket: name.to_owned(),
                reason: "no grpc-status".to_owned(),
            })
        }
    }
    let malformed = |reason: String| PodResourcesError::Malformed {
        socket: name.to_owned(),
        reason,
    };
    let message = grpc_message(&buf).map_err(malformed)?;
    decode_list(message).map_err(malformed)
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The one message of a unary answer: a 5-byte prefix (compressed flag,
/// big-endian length) and exactly that many bytes.
fn grpc_message(body: &[u8]) -> Result<&[u8], String> {
    let Some((prefix, rest)) = body.split_first_chunk::<5>() else {
        return Err(format!("{} bytes, no gRPC message", body.len()));
    };
    if prefix[0] != 0 {
        return Err("a compressed message (none was asked for)".to_owned());
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if len != rest.len() {
        return Err(format!("message length {len}, {} bytes follow", rest.len()));
    }
    Ok(rest)
}

/// `ListPodResourcesResponse` → the pods holding NVIDIA devices.
///
/// Fields read (api.proto): ListPodResourcesResponse `pod_resources` = 1;
/// PodResources `name` = 1, `namespace` = 2, `containers` = 3;
/// ContainerResources `devices` = 2; ContainerDevices `resource_name` = 1,
/// `device_ids` = 2. Every other field is skipped.
pub fn decode_list(message: &[u8]) -> Result<Vec<PodDevices>, String> {
    let mut pods = Vec::new();
    let mut seen = 0usize;
    for field in Fields::new(message) {
        let (number, value) = field?;
        if number != 1 {
            continue;
        }
        seen += 1;
        if seen > MAX_PODS {
            return Err(format!("more than {MAX_PODS} pods"));
        }
        let pod = decode_pod(value.bytes("pod_resources")?)?;
        if !pod.ids.is_empty() {
            pods.push(pod);
        }
    }
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Ok(pods)
}

fn decode_pod(message: &[u8]) -> Result<PodDevices, String> {
    let mut pod = PodDevices {
        namespace: String::new(),
        name: String::new(),
        ids: Vec::new(),
    };
    for field in Fields::new(message) {
        match field? {
            (1, v) => pod.name = v.string("PodResources.name")?,
            (2, v) => pod.namespace = v.string("PodResources.namespace")?,
            (3, v) => {
                for field in Fields::new(v.bytes("PodResources.containers")?) {
                    if let (2, d) = field? {
                        devices(d.bytes("ContainerResources.devices")?, &mut pod.ids)?;
                    }
                }
            }
            _ => {}
        }
    }
    pod.ids.sort();
    pod.ids.dedup();
    if pod.ids.len() > MAX_IDS_PER_POD {
        return Err(format!(
            "pod {}/{}: more than {MAX_IDS_PER_POD} device IDs",
            pod.namespace, pod.name
        ));
    }
    Ok(pod)
}

/// One ContainerDevices: its IDs into `ids` when its resource is NVIDIA's.
fn devices(message: &[u8], ids: &mut Vec<String>) -> Result<(), String> {
    let mut resource = String::new();
    let mut found = Vec::new();
    for field in Fields::new(message) {
        match field? {
            (1, v) => resource = v.string("ContainerDevices.resource_name")?,
            (2, v) => {
                let id = v.string("ContainerDevices.device_ids")?;
                if id.is_empty()
                    || id.len() > MAX_ID_BYTES
                    || !id.bytes().all(|b| b.is_ascii_graphic())
                {
                    return Err(format!(
                        "device ID {:?}: not 1 to {MAX_ID_BYTES} printable ASCII bytes",
                        id.chars().take(80).collect::<String>()
                    ));
                }
                found.push(id);
                if found.len() > MAX_IDS_PER_POD {
                    return Err(format!(
                        "more than {MAX_IDS_PER_POD} device IDs in a container"
                    ));
                }
            }
            _ => {}
        }
    }
    if resource.starts_with(NVIDIA_PREFIX) {
        ids.extend(found);
        if ids.len() > MAX_IDS_PER_POD {
            return Err(format!("more than {MAX_IDS_PER_POD} device IDs in a pod"));
        }
    }
    Ok(())
}

/// A protobuf field's value (wire types 0, 1, 2, 5; groups are refused).
enum Value<'a> {
    Number,
    Bytes(&'a [u8]),
}

impl<'a> Value<'a> {
    fn bytes(&self, what: &str) -> Result<&'a [u8], String> {
        match self {
            Value::Bytes(b) => Ok(b),
            Value::Number => Err(format!("{what}: a number where a message was expected")),
        }
    }

    fn string(&self, what: &str) -> Result<String, String> {
        let b = self.bytes(what)?;
        String::from_utf8(b.to_vec()).map_err(|_| format!("{what}: not UTF-8"))
    }
}

/// The fields of one protobuf message, in order.
struct Fields<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Fields<'a> {
    fn new(message: &'a [u8]) -> Self {
        Fields {
            rest: message,
            failed: false,
        }
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let Some((&b, rest)) = self.rest.split_first() else {
                return Err("a varint cut short".to_owned());
            };
            self.rest = rest;
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a varint over 10 bytes".to_owned())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.rest.len() {
            return Err(format!(
                "a field of {n} bytes where {} remain",
                self.rest.len()
            ));
        }
        let (taken, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(taken)
    }

    fn next_field(&mut self) -> Result<(u64, Value<'a>), String> {
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 {
            return Err("field number 0".to_owned());
        }
        let value = match key & 7 {
            0 => {
                self.varint()?;
                Value::Number
            }
            1 => {
                self.take(8)?;
                Value::Number
            }
            2 => {
                let len = self.varint()?;
                let len = usize::try_from(len).map_err(|_| "a length over usize".to_owned())?;
                Value::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Value::Number
            }
            t => return Err(format!("wire type {t} (groups or unknown)")),
        };
        Ok((number, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Value<'a>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let r = self.next_field();
        self.failed = r.is_err();
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn bytes_field(number: u64, value: &[u8], out: &mut Vec<u8>) {
        varint(number << 3 | 2, out);
        varint(value.len() as u64, out);
        out.extend_from_slice(value);
    }

    fn container(resource: &str, ids: &[&str]) -> Vec<u8> {
        let mut devices = Vec::new();
        bytes_field(1, resource.as_bytes(), &mut devices);
        for id in ids {
            bytes_field(2, id.as_bytes(), &mut devices);
        }
        // TopologyInfo (field 3), skipped.
        bytes_field(3, &[0x0a, 0x02, 0x08, 0x01], &mut devices);
        let mut c = Vec::new();
        bytes_field(1, b"main", &mut c);
        bytes_field(2, &devices, &mut c);
        // cpu_ids (packed int64, field 3), skipped.
        bytes_field(3, &[1, 2, 3], &mut c);
        c
    }

    fn pod(ns: &str, name: &str, containers: &[Vec<u8>]) -> Vec<u8> {
        let mut p = Vec::new();
        bytes_field(1, name.as_bytes(), &mut p);
        bytes_field(2, ns.as_bytes(), &mut p);
        for c in containers {
            bytes_field(3, c, &mut p);
        }
        p
    }

    #[test]
    fn nvidia_devices_are_read_pod_by_pod_and_the_rest_skipped() {
        let mut list = Vec::new();
        bytes_field(
            1,
            &pod(
                "ml",
                "train-0",
                &[
                    container("nvidia.com/gpu", &["GPU-b", "GPU-a"]),
                    container("example.com/fpga", &["fpga-0"]),
                ],
            ),
            &mut list,
        );
        bytes_field(
            1,
            &pod("kube-system", "dns", &[container("cpu", &[])]),
            &mut list,
        );
        bytes_field(
            1,
            &pod(
                "ml",
                "infer",
                &[container("nvidia.com/mig-1g.10gb", &["MIG-x::1"])],
            ),
            &mut list,
        );
        // A field of a later API version, as a number: skipped.
        varint(9 << 3, &mut list);
        varint(7, &mut list);
        let pods = decode_list(&list).unwrap();
        assert_eq!(
            pods,
            vec![
                PodDevices {
                    namespace: "ml".into(),
                    name: "infer".into(),
                    ids: vec!["MIG-x::1".into()],
                },
                PodDevices {
                    namespace: "ml".into(),
                    name: "train-0".into(),
                    ids: vec!["GPU-a".into(), "GPU-b".into()],
                },
            ]
        );
    }

    #[test]
    fn malformed_answers_are_errors_not_panics() {
        // A length past the end, a varint cut short, a group, field 0, a
        // number where a message belongs, a control character in an ID.
        let cases: Vec<Vec<u8>> = vec![
            vec![0x0a, 0x7f, 0x01],
            vec![0x0a, 0xff],
            vec![0x0b],
            vec![0x02, 0x00],
            vec![0x08, 0x01],
            {
                let mut l = Vec::new();
                bytes_field(
                    1,
                    &pod("ml", "p", &[container("nvidia.com/gpu", &["GPU-\n"])]),
                    &mut l,
                );
                l
            },
            vec![
                0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ],
        ];
        for case in cases {
            assert!(decode_list(&case).is_err(), "{case:?} decoded");
        }
    }

    #[test]
    fn the_grpc_frame_is_checked() {
        assert_eq!(grpc_message(&[0, 0, 0, 0, 1, 7]).unwrap(), &[7]);
        assert!(grpc_message(&[0, 0, 0, 0, 2, 7]).is_err());
        assert!(grpc_message(&[1, 0, 0, 0, 1, 7]).is_err());
        assert!(grpc_message(&[0, 0]).is_err());
    }
}
