//! The Memcached topology, read at each scrape: nodes known, the cluster
//! config version, discovery polls, TLS handshake failures, and each node's
//! connections. The node label comes from the configuration or the
//! cluster config, never from requests.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::metrics::catalogue::{Described, Kind, Label};

/// What a `node` label holds.
const NODE: &str = "a node's address, from the configuration or the cluster config";
use crate::store::TopologySource;

/// The Memcached store's families, in the order they are served.
pub const MEMCACHED_FAMILIES: &[Described; 10] = &[
    Described {
        name: "slidegate_memcached_nodes",
        kind: Kind::Gauge,
        labels: &[],
        help: "Memcached nodes in use (from the configuration or from discovery).",
    },
    Described {
        name: "slidegate_memcached_config_version",
        kind: Kind::Gauge,
        labels: &[],
        help: "Version of the cluster config in use (Auto Discovery).",
    },
    Described {
        name: "slidegate_memcached_discovery_polls",
        kind: Kind::Counter,
        labels: &[Label {
            name: "result",
            values: "`applied`, `ignored`, `malformed`, `failed`",
        }],
        help: "Auto Discovery polls by result: applied, ignored (not newer, or no node), malformed, failed.",
    },
    Described {
        name: "slidegate_memcached_tls_handshake_failures",
        kind: Kind::Counter,
        labels: &[],
        help: "TLS handshakes with Memcached that failed (certificate, name, protocol).",
    },
    Described {
        name: "slidegate_memcached_connections",
        kind: Kind::Gauge,
        labels: &[Label {
            name: "node",
            values: NODE,
        }],
        help: "Live connections per Memcached node.",
    },
    Described {
        name: "slidegate_store_connections",
        kind: Kind::Gauge,
        labels: &[
            Label {
                name: "node",
                values: NODE,
            },
            Label {
                name: "state",
                values: "`ready`, `overdue`, `down`, `draining`",
            },
        ],
        help: "Connections per Memcached node by state: ready, overdue (a reply later than the call \
             timeout: it takes no new requests), down (being dialled), draining (given up as \
             stalled, still reading its late replies to take back what they added).",
    },
    Described {
        name: "slidegate_store_redials",
        kind: Kind::Counter,
        labels: &[
            Label {
                name: "node",
                values: NODE,
            },
            Label {
                name: "reason",
                values: "`failed`, `stalled`, `overdue`, `moved`",
            },
        ],
        help: "Connections to a Memcached node dialled again, by reason: failed (the connection or a \
             dial failed), stalled (a reply later than the stall bound), overdue (an extra \
             connection while all were overdue), moved (the node's address changed).",
    },
    Described {
        name: "slidegate_store_draining_requests",
        kind: Kind::Gauge,
        labels: &[Label {
            name: "node",
            values: NODE,
        }],
        help: "Requests written on draining connections whose replies have not come yet.",
    },
    Described {
        name: "slidegate_store_late_take_backs",
        kind: Kind::Counter,
        labels: &[Label {
            name: "node",
            values: NODE,
        }],
        help: "Counted requests taken back from a reply that came after their connection was given \
             up as stalled: nobody was told they counted.",
    },
    Described {
        name: "slidegate_store_lost_replies",
        kind: Kind::Counter,
        labels: &[Label {
            name: "node",
            values: NODE,
        }],
        help: "Counted requests whose reply never came (their connection failed, or its drain ran \
             out): what they added, if applied, stays counted until its bucket expires.",
    },
];

/// The Memcached store's families, read from its topology at each scrape.
#[derive(Debug)]
pub struct TopologyCollector(pub TopologySource);

impl TopologyCollector {
    pub fn register(self, registry: &mut Registry) {
        registry.register_collector(Box::new(self));
    }
}

fn gauge(value: usize) -> ConstGauge {
    ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX))
}

impl Collector for TopologyCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let [
            nodes,
            config_version,
            discovery_polls,
            tls_failures,
            live_connections,
            connections,
            redials,
            draining_requests,
            late_take_backs,
            lost_replies,
        ] = MEMCACHED_FAMILIES;
        let snapshot = self.0.snapshot();
        gauge(snapshot.nodes.len()).encode(nodes.describe(&mut encoder)?)?;
        if let Some(version) = snapshot.version {
            ConstGauge::new(i64::try_from(version).unwrap_or(i64::MAX))
                .encode(config_version.describe(&mut encoder)?)?;
        }
        let mut polls = discovery_polls.describe(&mut encoder)?;
        for (result, count) in &snapshot.polls {
            ConstCounter::new(*count).encode(polls.encode_family(&[("result", *result)])?)?;
        }
        ConstCounter::new(snapshot.tls_failures).encode(tls_failures.describe(&mut encoder)?)?;
        let mut live = live_connections.describe(&mut encoder)?;
        for node in &snapshot.nodes {
            gauge(node.live()).encode(live.encode_family(&[("node", node.name.as_str())])?)?;
        }
        let mut states = connections.describe(&mut encoder)?;
        for node in &snapshot.nodes {
            let counts = node.states;
            for (state, count) in [
                ("ready", counts.ready),
                ("overdue", counts.overdue),
                ("down", counts.down),
                ("draining", counts.draining),
            ] {
                gauge(count).encode(
                    states.encode_family(&[("node", node.name.as_str()), ("state", state)])?,
                )?;
            }
        }
        let mut redialled = redials.describe(&mut encoder)?;
        for node in &snapshot.nodes {
            for (reason, count) in &node.redials {
                ConstCounter::new(*count).encode(
                    redialled
                        .encode_family(&[("node", node.name.as_str()), ("reason", *reason)])?,
                )?;
            }
        }
        let mut owed = draining_requests.describe(&mut encoder)?;
        for node in &snapshot.nodes {
            gauge(node.states.draining_owed)
                .encode(owed.encode_family(&[("node", node.name.as_str())])?)?;
        }
        let mut late = late_take_backs.describe(&mut encoder)?;
        for node in &snapshot.nodes {
            ConstCounter::new(node.late_take_backs)
                .encode(late.encode_family(&[("node", node.name.as_str())])?)?;
        }
        let mut lost = lost_replies.describe(&mut encoder)?;
        for node in &snapshot.nodes {
            ConstCounter::new(node.lost_replies)
                .encode(lost.encode_family(&[("node", node.name.as_str())])?)?;
        }
        Ok(())
    }
}
