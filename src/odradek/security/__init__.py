"""Security: who the caller is and what it may do.

TLS contexts from Kafka's ``ssl.*`` keys, SASL (PLAIN, SCRAM-SHA-256/512) as sans-I/O
state machines, principals, and the ACL authorizer's decisions. Nothing here touches a
socket, a file of the log or the metadata store: the server drives these machines and the
cluster room stores what they need (credentials, ACLs).
"""
