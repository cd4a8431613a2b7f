#!/usr/bin/env python3
"""An aioquic client and server on loopback (a third-party QUIC stack, not this project's).

The client opens ONE bidirectional stream and writes N messages back to back on it (message i
at offset sum of the earlier lengths), one every INTERVAL seconds; the server echoes each. With
--key-updates K the client requests a key update after each N/(K+1) messages. The TLS secrets go
to the key log (SSLKEYLOGFILE format). Bounded: exits after the last echo or TIMEOUT seconds.

usage: stream_peer.py PORT KEYLOG N INTERVAL KEY_UPDATES
"""

import asyncio
import sys
import tempfile

from aioquic.asyncio import connect, serve
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import StreamDataReceived

from tls import self_signed

TIMEOUT = 20.0
SIZE = 200


class Echo(QuicConnectionProtocol):
    def quic_event_received(self, event):
        if isinstance(event, StreamDataReceived):
            self._quic.send_stream_data(event.stream_id, event.data, event.end_stream)
            self.transmit()


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.received = 0
        self.done = asyncio.Event()
        self.expected = 0

    def quic_event_received(self, event):
        if isinstance(event, StreamDataReceived):
            self.received += len(event.data)
            if self.received >= self.expected:
                self.done.set()


async def main(port, keylog, n, interval, key_updates):
    with tempfile.TemporaryDirectory() as d:
        cert, key = self_signed(d, "localhost")
        log = open(keylog, "a")
        server_cfg = QuicConfiguration(is_client=False, alpn_protocols=["tbx"])
        server_cfg.load_cert_chain(cert, key)
        server = await serve("127.0.0.1", port, configuration=server_cfg, create_protocol=Echo)
        client_cfg = QuicConfiguration(
            is_client=True, alpn_protocols=["tbx"], secrets_log_file=log
        )
        client_cfg.verify_mode = False
        async with connect(
            "127.0.0.1", port, configuration=client_cfg, create_protocol=Client
        ) as client:
            client.expected = n * SIZE
            stream = client._quic.get_next_available_stream_id()
            every = max(1, n // (key_updates + 1))
            for i in range(n):
                msg = i.to_bytes(8, "little") + bytes([i % 251]) * (SIZE - 8)
                client._quic.send_stream_data(stream, msg, i == n - 1)
                if key_updates and i and i % every == 0 and i // every <= key_updates:
                    client._quic.request_key_update()
                client.transmit()
                await asyncio.sleep(interval)
            await asyncio.wait_for(client.done.wait(), TIMEOUT)
        server.close()
        log.close()


if __name__ == "__main__":
    port, keylog, n, interval, updates = sys.argv[1:6]
    asyncio.run(
        asyncio.wait_for(
            main(int(port), keylog, int(n), float(interval), int(updates)), TIMEOUT
        )
    )
