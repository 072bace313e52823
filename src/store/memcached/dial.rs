//! Dialling a node: plain TCP, or TLS for ElastiCache's encryption in
//! transit (rustls: no OpenSSL to build against). A certificate that does
//! not verify fails the dial with the reason; nothing falls back to
//! plaintext.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// TLS settings of the connections to Memcached.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// A PEM file of CA certificates to trust instead of the system's roots.
    pub ca_file: Option<std::path::PathBuf>,
    /// The name every certificate must carry; by default the host of each
    /// address (for discovered nodes: the host name the config gives).
    pub server_name: Option<String>,
}

/// Opens connections, the same way for the data nodes and the discovery
/// endpoint.
pub struct Dialer {
    connect_timeout: Duration,
    /// Handshakes that failed (a certificate that did not verify, say).
    tls_failures: std::sync::atomic::AtomicU64,
    #[cfg(feature = "tls")]
    tls: Option<(tokio_rustls::TlsConnector, Option<String>)>,
}

impl Dialer {
    pub fn new(connect_timeout: Duration, tls: Option<&TlsOptions>) -> Result<Dialer, String> {
        #[cfg(feature = "tls")]
        let tls = tls
            .map(|options| Ok::<_, String>((connector(options)?, options.server_name.clone())))
            .transpose()?;
        #[cfg(not(feature = "tls"))]
        if tls.is_some() {
            return Err("TLS needs slidegate built with the `tls` feature".to_owned());
        }
        Ok(Dialer {
            connect_timeout,
            tls_failures: std::sync::atomic::AtomicU64::new(0),
            #[cfg(feature = "tls")]
            tls,
        })
    }

    /// Connect to `addr`; over TLS, verify the certificate against
    /// `server_name` (else the configured name, else the host of `addr`).
    pub async fn dial(&self, addr: &str, server_name: Option<&str>) -> Result<Stream, String> {
        let connecting = TcpStream::connect(addr);
        let tcp = match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => return Err(format!("cannot connect to {addr}: {error}")),
            Err(_) => {
                return Err(format!(
                    "cannot connect to {addr} within {:?}",
                    self.connect_timeout
                ));
            }
        };
        let _ = tcp.set_nodelay(true);
        #[cfg(feature = "tls")]
        if let Some((connector, configured)) = &self.tls {
            let name = configured
                .as_deref()
                .or(server_name)
                .unwrap_or_else(|| host_of(addr));
            let server_name = rustls_pki_types::ServerName::try_from(name.to_owned())
                .map_err(|error| format!("TLS server name {name:?}: {error}"))?;
            let handshake = connector.connect(server_name, tcp);
            return match tokio::time::timeout(self.connect_timeout, handshake).await {
                Ok(Ok(stream)) => Ok(Stream::Tls(Box::new(stream))),
                Ok(Err(error)) => {
                    self.tls_failed();
                    Err(format!("TLS handshake with {addr} ({name}): {error}"))
                }
                Err(_) => {
                    self.tls_failed();
                    Err(format!("TLS handshake with {addr} timed out"))
                }
            };
        }
        let _ = server_name;
        Ok(Stream::Plain(tcp))
    }

    #[cfg(feature = "tls")]
    fn tls_failed(&self) {
        self.tls_failures
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn tls_failures(&self) -> u64 {
        self.tls_failures.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn is_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.tls.is_some();
        #[cfg(not(feature = "tls"))]
        false
    }
}

/// Build the TLS client the connections would use (its CA file read, or
/// the system's roots found) without dialling anything: what
/// `slidegate --check` runs so that a bad CA file fails the check as it
/// would fail the start.
pub fn check_tls(options: &TlsOptions) -> Result<(), String> {
    Dialer::new(Duration::ZERO, Some(options)).map(|_| ())
}

/// The host part of `host:port` or `[v6]:port`.
#[cfg(feature = "tls")]
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(feature = "tls")]
fn connector(options: &TlsOptions) -> Result<tokio_rustls::TlsConnector, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;

    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    match &options.ca_file {
        Some(path) => {
            let certificates = CertificateDer::pem_file_iter(path)
                .map_err(|error| format!("tls_ca_file {}: {error}", path.display()))?;
            for certificate in certificates {
                let certificate = certificate
                    .map_err(|error| format!("tls_ca_file {}: {error}", path.display()))?;
                roots
                    .add(certificate)
                    .map_err(|error| format!("tls_ca_file {}: {error}", path.display()))?;
            }
            if roots.is_empty() {
                return Err(format!(
                    "tls_ca_file {}: no certificate in it",
                    path.display()
                ));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for certificate in found.certs {
                let _ = roots.add(certificate);
            }
            if roots.is_empty() {
                return Err("no system CA certificates found; give tls_ca_file".to_owned());
            }
        }
    }
    let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("TLS: {error}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(std::sync::Arc::new(
        config,
    )))
}

/// A connection to a node.
pub enum Stream {
    Plain(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            #[cfg(feature = "tls")]
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            #[cfg(feature = "tls")]
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_flush(cx),
            #[cfg(feature = "tls")]
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            #[cfg(feature = "tls")]
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}
