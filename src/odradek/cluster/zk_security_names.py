"""The names of ZooKeeper's client security settings (:mod:`odradek.cluster.zk_security`).

Plain constants, apart from the module that uses them, so that ``odradek
zookeeper-security-migration``'s parser can name them in its help without importing
kazoo: every ``odradek`` command builds that parser (issue 51).
"""

from __future__ import annotations

__all__ = ["JAVA_LOGIN_CONFIG", "KAFKA_OPTS", "ZK_TLS_SYSTEM_PROPERTIES"]

#: The JVM system property naming the JAAS file with the ZooKeeper client's credentials.
JAVA_LOGIN_CONFIG = "java.security.auth.login.config"
#: The environment variable whose ``-D`` properties Kafka's scripts hand to the JVM.
KAFKA_OPTS = "KAFKA_OPTS"

#: Kafka's ZooKeeper TLS configs → the ZooKeeper client system property each one falls
#: back to (Kafka's ZkSslConfigToSystemPropertyMap).
ZK_TLS_SYSTEM_PROPERTIES = {
    "zookeeper.ssl.client.enable": "zookeeper.client.secure",
    "zookeeper.clientCnxnSocket": "zookeeper.clientCnxnSocket",
    "zookeeper.ssl.keystore.location": "zookeeper.ssl.keyStore.location",
    "zookeeper.ssl.keystore.password": "zookeeper.ssl.keyStore.password",
    "zookeeper.ssl.keystore.type": "zookeeper.ssl.keyStore.type",
    "zookeeper.ssl.truststore.location": "zookeeper.ssl.trustStore.location",
    "zookeeper.ssl.truststore.password": "zookeeper.ssl.trustStore.password",
    "zookeeper.ssl.truststore.type": "zookeeper.ssl.trustStore.type",
    "zookeeper.ssl.protocol": "zookeeper.ssl.protocol",
    "zookeeper.ssl.enabled.protocols": "zookeeper.ssl.enabledProtocols",
    "zookeeper.ssl.cipher.suites": "zookeeper.ssl.ciphersuites",
    "zookeeper.ssl.endpoint.identification.algorithm": "zookeeper.ssl.hostnameVerification",
}
