//! Mode 1: the same datagram sent on both interfaces, matched by payload hash (or, when
//! configured, by an application message id).

use crate::capture::Dir;
use crate::config::MatchMode;
use crate::flow::{FlowKey, Proto};
use crate::input::Datagram;
use crate::matcher::{forced_mode, mix, server_port};
use crate::message::MsgId;
use crate::shared::Shared;

impl Shared {
    /// One UDP datagram: a copy of the message its payload (or application id) names.
    pub(crate) fn on_datagram(&mut self, d: &Datagram) {
        let Some(pkt) = self.packet(&d.meta) else {
            return;
        };
        let key = FlowKey::Datagram {
            server_port: server_port(&d.meta.src, &d.meta.dst),
        };
        self.remember_tuple(pkt.tuple, || key.clone());
        let forced = forced_mode(&self.cfg, (&d.meta.src, &d.meta.dst), None, None);
        let fr = self
            .flows
            .get_or_insert(&key, pkt.ts_ns, || Proto::Datagram {
                datagrams: 0,
                requests: crate::FastMap::default(),
            });
        let mode = match (forced, d.app_msg_id) {
            (Some(MatchMode::AppId), Some(_)) => MatchMode::AppId,
            (Some(m), _) if m != MatchMode::AppId => m,
            _ => MatchMode::Datagram,
        };
        if let Some(f) = self.flows.get_mut(fr) {
            f.mode = Some(mode);
            f.forced = forced.is_some();
            if let Proto::Datagram { datagrams, .. } = &mut f.proto {
                *datagrams += 1;
            }
        }
        let up = pkt.up.unwrap_or(true);
        let (mkey, id) = match (mode, d.app_msg_id) {
            (MatchMode::AppId, Some(app)) => (mix(&[2, u64::from(up), app]), MsgId::App(app)),
            _ => (
                mix(&[1, u64::from(up), d.payload_hash]),
                MsgId::Hash(d.payload_hash),
            ),
        };
        let r = self.sight(pkt.sighting(fr, mkey, id, u64::from(d.payload_len)));
        // Request → response (one end observed): a reply carrying the request's application id.
        let max_waiting = self.cfg.max_unacked_per_flow;
        let mut rr_sample = None;
        let mut forgotten = 0u64;
        if let (Some(app), Some(f)) = (d.app_msg_id, self.flows.get_mut(fr)) {
            if let Proto::Datagram { requests, .. } = &mut f.proto {
                match (pkt.up, pkt.dir) {
                    (Some(true), Dir::Out) => {
                        if requests.len() >= max_waiting && !requests.contains_key(&app) {
                            forgotten = requests.len() as u64;
                            requests.clear();
                        }
                        requests.entry(app).or_insert(pkt.ts_ns);
                    }
                    (Some(false), Dir::In) => {
                        rr_sample = requests
                            .remove(&app)
                            .map(|sent| pkt.ts_ns.saturating_sub(sent) / 1000);
                    }
                    _ => {}
                }
            }
        }
        self.evicted_unacked += forgotten;
        if let Some(us) = rr_sample {
            if self.request_response.record(us) {
                self.clamped += 1;
            }
        }
        if let Some(f) = self.flows.get_mut(fr) {
            if pkt.count_wire {
                f.amp.wire += pkt.wire;
                if r.repeat || r.late {
                    f.amp.retransmit += pkt.wire;
                }
            }
        }
    }
}
