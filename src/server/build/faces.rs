//! The faces' listeners, bound from the configuration and served with the
//! app: the HTTP API (with forward-auth and the operations endpoints), and
//! Envoy RLS and RLQS in a build with the `grpc` feature.

use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::config::Config;
use crate::server::App;
use crate::server::shutdown::Face;

/// The listeners of the faces a configuration asks for: the HTTP API (with
/// forward-auth and the operations endpoints), and Envoy RLS and RLQS when
/// their `listen` is set.
pub struct Faces {
    http: TcpListener,
    rls: Option<TcpListener>,
    rlqs: Option<TcpListener>,
}

impl Faces {
    /// Bind every face's listener, each said in the log.
    pub async fn bind(config: &Config) -> anyhow::Result<Faces> {
        let http = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        tracing::info!(
            "slidegate listening on http://{}",
            crate::server::describe(&http)
        );
        let (rls, rlqs) = bind_envoy(config).await?;
        Ok(Faces { http, rls, rlqs })
    }

    /// Serve every face with `app`, each until its `shutdown()` completes;
    /// the tasks, named, for `shutdown::drain`.
    pub fn serve<F>(self, app: Arc<App>, shutdown: impl Fn() -> F) -> Vec<(&'static str, Face)>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut faces = serve_envoy(self.rls, self.rlqs, &app, &shutdown);
        let (listener, stopped) = (self.http, shutdown());
        let http: Face = tokio::spawn(async move {
            crate::server::serve(listener, app, stopped)
                .await
                .context("HTTP server")
        });
        faces.insert(0, ("HTTP", http));
        faces
    }
}

#[cfg(feature = "grpc")]
async fn bind_envoy(config: &Config) -> anyhow::Result<(Option<TcpListener>, Option<TcpListener>)> {
    let rls = match config.rls_listen {
        Some(address) => Some(bind_face("Envoy RLS", address).await?),
        None => None,
    };
    let rlqs = match config.rlqs.listen {
        Some(address) => {
            let listener = bind_face("Envoy RLQS", address).await?;
            tracing::info!(
                buckets = config.rlqs.buckets.len(),
                "RLQS bucket rules loaded"
            );
            Some(listener)
        }
        None => None,
    };
    Ok((rls, rlqs))
}

/// Bind a gRPC face's listener and say where it serves.
#[cfg(feature = "grpc")]
async fn bind_face(name: &str, address: std::net::SocketAddr) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen for {name} on {address}"))?;
    tracing::info!(
        "slidegate serving {name} (gRPC) on {}",
        crate::server::describe(&listener)
    );
    Ok(listener)
}

#[cfg(feature = "grpc")]
fn serve_envoy<F>(
    rls: Option<TcpListener>,
    rlqs: Option<TcpListener>,
    app: &Arc<App>,
    shutdown: &impl Fn() -> F,
) -> Vec<(&'static str, Face)>
where
    F: Future<Output = ()> + Send + 'static,
{
    let mut faces = Vec::new();
    if let Some(listener) = rls {
        let (app, shutdown) = (app.clone(), shutdown());
        let face: Face = tokio::spawn(async move {
            crate::server::rls::serve(listener, app, shutdown)
                .await
                .context("RLS server")
        });
        faces.push(("RLS", face));
    }
    if let Some(listener) = rlqs {
        let (app, shutdown) = (app.clone(), shutdown());
        let face: Face = tokio::spawn(async move {
            crate::server::rlqs::serve(listener, app, shutdown)
                .await
                .context("RLQS server")
        });
        faces.push(("RLQS", face));
    }
    faces
}

#[cfg(not(feature = "grpc"))]
async fn bind_envoy(
    _config: &Config,
) -> anyhow::Result<(Option<TcpListener>, Option<TcpListener>)> {
    Ok((None, None))
}

#[cfg(not(feature = "grpc"))]
fn serve_envoy<F>(
    _rls: Option<TcpListener>,
    _rlqs: Option<TcpListener>,
    _app: &Arc<App>,
    _shutdown: &impl Fn() -> F,
) -> Vec<(&'static str, Face)> {
    Vec::new()
}
