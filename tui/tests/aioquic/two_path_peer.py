#!/usr/bin/env python3
"""Redundant sending over two paths with aioquic (a third-party QUIC stack, not this project's).

The client opens one connection per path (to ADDR_A and ADDR_B, the same PORT) and writes the
same N messages back to back on ONE bidirectional stream of each connection (message i at the
same offset on both): the way aioquic, quiche and tquic applications send a message stream.
The server listens on both addresses and reads. TLS secrets go to the key log.

FRAMING `plain`: 600-byte messages (id, u64 little-endian, then filler), one write each.
FRAMING `len`: messages of 40 to 1500 bytes, each a u16 big-endian length of the bytes after it,
then the id (u64 little-endian) and filler, written three at a time (frames then hold several
messages, and messages cross packets).

Bounded: exits after the server read everything or TIMEOUT seconds.

usage: two_path_peer.py server ADDR_A ADDR_B PORT N FRAMING
       two_path_peer.py client ADDR_A ADDR_B PORT N FRAMING KEYLOG INTERVAL
"""

import asyncio
import sys
import tempfile

from aioquic.asyncio import connect, serve
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import StreamDataReceived

from tls import self_signed

TIMEOUT = 30.0


def messages(n, framing):
    """The messages, and the writes they are sent in."""
    out = []
    for i in range(n):
        if framing == "plain":
            out.append(i.to_bytes(8, "little") + bytes([i % 251]) * 592)
        else:
            size = 40 + (i * 397) % 1461
            body = i.to_bytes(8, "little") + bytes([i % 251]) * (size - 10)
            out.append(len(body).to_bytes(2, "big") + body)
    per = 1 if framing == "plain" else 3
    return [b"".join(out[k : k + per]) for k in range(0, n, per)]


async def server(addrs, port, expected):
    got = {}
    done = asyncio.Event()

    class Reader(QuicConnectionProtocol):
        def quic_event_received(self, event):
            if isinstance(event, StreamDataReceived):
                got[id(self)] = got.get(id(self), 0) + len(event.data)
                if len(got) == len(addrs) and all(v >= expected for v in got.values()):
                    done.set()

    with tempfile.TemporaryDirectory() as d:
        cert, key = self_signed(d, "gateway")
        cfg = QuicConfiguration(is_client=False, alpn_protocols=["tbx"])
        cfg.load_cert_chain(cert, key)
        servers = [
            await serve(a, port, configuration=cfg, create_protocol=Reader) for a in addrs
        ]
        print("listening", flush=True)
        await done.wait()
        # Let the last ACKs leave.
        await asyncio.sleep(0.5)
        for s in servers:
            s.close()


async def client(addrs, port, writes, keylog, interval):
    log = open(keylog, "a")
    cfg = QuicConfiguration(is_client=True, alpn_protocols=["tbx"], secrets_log_file=log)
    cfg.verify_mode = False
    async with connect(addrs[0], port, configuration=cfg) as a:
        async with connect(addrs[1], port, configuration=cfg) as b:
            streams = [(c, c._quic.get_next_available_stream_id()) for c in (a, b)]
            for w in writes:
                for c, s in streams:
                    c._quic.send_stream_data(s, w, False)
                    c.transmit()
                await asyncio.sleep(interval)
            # Until everything is acknowledged (bounded by TIMEOUT).
            await asyncio.sleep(1.0)
    log.close()


if __name__ == "__main__":
    role, addr_a, addr_b, port, n, framing = sys.argv[1:7]
    writes = messages(int(n), framing)
    expected = sum(len(w) for w in writes)
    if role == "server":
        job = server([addr_a, addr_b], int(port), expected)
    else:
        keylog, interval = sys.argv[7:9]
        job = client([addr_a, addr_b], int(port), writes, keylog, float(interval))
    asyncio.run(asyncio.wait_for(job, TIMEOUT))
