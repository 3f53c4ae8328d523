"""The asyncio network layer: accepting connections, reading requests, dispatching them to
their handlers, writing the answers in order, shutting down.

Follows Kafka's ``SocketServer`` (Acceptor + Processor) and ``RequestChannel``, on one
asyncio event loop instead of threads. One module a job, each opening with how it works:

================= =======================================================================
``acceptor``      :class:`KafkaServer`: bind, listen, the accept loop and its connection
                  limits (``max.connections*``, the creation rate), rejections logged
                  without flooding, graceful shutdown (Kafka's ``SocketServer``, Acceptor)
``connection``    :class:`KafkaConnection`, an ``asyncio.Protocol``: a connection's life,
                  accept (after the TLS handshake) → authenticate → serve → close, in one
                  class; idle expiry
``reader``        framing (``socket.request.max.bytes``), the in-flight bounds
                  (``queued.max.requests``, ``queued.max.request.bytes``), quota muting,
                  refusing a bad frame after answering the requests before it
``dispatch``      routing a frame to its handler, serial requests, answering a handler's
                  error with the API's error response, encoding (``RequestChannel``)
``metering``      request timings and the request_percentage quota, one layer around a
                  handler's first step (``RequestChannel.Metrics``, KIP-124, KIP-219)
``eager``         running a handler up to its first wait inside dispatch, without a task
``inflight``      a connection's requests in flight, in order, and what they hold
``writer``        the ordered response writer: coalescing, file regions (zero-copy
                  ``sendfile``; bounded chunks on TLS), drain
``tls_transport`` a TLS connection's transport: the handshake, then OpenSSL over
                  memory BIOs driven from the loop, fewer copies than asyncio's TLS layer
                  (Kafka's ``SslTransportLayer``)
``security``      a listener's security protocol, TLS context, principal mapping, SASL
                  settings and authentication counts (Kafka's ``ChannelBuilders``)
``sasl``          a SASL connection's gate and authenticator (``SaslServerAuthenticator``)
``config``        :class:`NetworkConfig`, the Kafka broker configs the layer reads
================= =======================================================================

A request's path: bytes → ``reader`` (frames, bounds) → ``dispatch`` (context, handler
started eagerly, metered if timed or charged) → ``inflight`` (in arrival order) →
``writer`` (answers in that order, as soon as each is done). Backpressure: reading pauses
at the in-flight bounds or under a quota throttle, the writer awaits the transport's
drain (:mod:`odradek.server.flow_control`).

Every module logs as ``odradek.server.network``.
"""

from odradek.server.network.acceptor import KafkaServer
from odradek.server.network.config import NetworkConfig
from odradek.server.network.connection import KafkaConnection

__all__ = ["KafkaConnection", "KafkaServer", "NetworkConfig"]
