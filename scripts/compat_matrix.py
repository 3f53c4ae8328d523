"""Print which API versions each real client uses against Odradek (docs/compatibility.md).

Run: .venv/bin/python scripts/compat_matrix.py  (needs make test's installs: kcat, Java jars)
"""
from odradek.testing import running_broker
from odradek.protocol.api_keys import ApiKey
seen = collections.defaultdict(set)
with running_broker() as b:
    reg = b.broker.registry
    orig = reg.lookup
    current = {"c": "?"}
    def lookup(k, v):
        seen[current["c"]].add((ApiKey(k).name, v)); return orig(k, v)
    class Proxy:
        def __getattr__(self, n): return getattr(reg, n)
        def lookup(self, k, v): return lookup(k, v)
        def __contains__(self, k): return k in reg
    for s in b.broker.servers: s.registry = Proxy()
    B = b.bootstrap
    # confluent-kafka
    current["c"]="confluent-kafka (librdkafka 2.x)"
    from confluent_kafka import Producer, Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic, ConfigResource
    a = AdminClient({"bootstrap.servers": B}); a.create_topics([NewTopic("ck",1,1)])["ck"].result(10)
    p = Producer({"bootstrap.servers": B}); p.produce("ck", b"v", key=b"k"); p.flush(10)
    c = Consumer({"bootstrap.servers": B, "group.id": "g", "enable.auto.commit": False}); c.assign([TopicPartition("ck",0,0)]); c.poll(3); c.get_watermark_offsets(TopicPartition("ck",0)); c.offsets_for_times([TopicPartition("ck",0,0)]); c.close()
    r=ConfigResource(ConfigResource.Type.TOPIC,"ck"); a.describe_configs([r])[r].result(10); a.delete_topics(["ck"])["ck"].result(10)
    # kcat
    current["c"]="kcat 1.7.1 (librdkafka 2.0.2)"
    subprocess.run(["kcat","-b",B,"-P","-t","kc"], input=b"x\n", check=True)
    subprocess.run(["kcat","-b",B,"-C","-t","kc","-e","-q"], check=True, capture_output=True)
    subprocess.run(["kcat","-b",B,"-Q","-t","kc:0:0"], check=True, capture_output=True)
    # kafka-python
    current["c"]="kafka-python 3.0"
    from kafka import KafkaProducer, KafkaConsumer, KafkaAdminClient
    from kafka.admin import NewTopic as KNT
    ka = KafkaAdminClient(bootstrap_servers=B); ka.create_topics([KNT("kp",1,1)])
    kp = KafkaProducer(bootstrap_servers=B); kp.send("kp", b"v", key=b"k"); kp.flush(); kp.close()
    from kafka import TopicPartition as KTP
    kc = KafkaConsumer(bootstrap_servers=B, consumer_timeout_ms=2000); kc.assign([KTP("kp",0)]); kc.seek(KTP("kp",0),0); list(kc); kc.end_offsets([KTP("kp",0)]); kc.close(); ka.delete_topics(["kp"]); ka.close()
    # aiokafka
    current["c"]="aiokafka 0.14"
    async def aio():
        from aiokafka import AIOKafkaProducer, AIOKafkaConsumer, TopicPartition as ATP
        pr = AIOKafkaProducer(bootstrap_servers=B); await pr.start(); await pr.send_and_wait("ak", b"v", key=b"k"); await pr.stop()
        co = AIOKafkaConsumer(bootstrap_servers=B); await co.start(); co.assign([ATP("ak",0)]); co.seek(ATP("ak",0),0); await co.getmany(timeout_ms=1000); await co.end_offsets([ATP("ak",0)]); await co.stop()
    asyncio.run(aio())
    current["c"]="Java kafka-clients 3.9.1"
    sys.path.insert(0, ".")
    from tests.interop._broker import _java_runner
    run = _java_runner()
    res = run(B, "roundtrip", "jv", 5)
    print("java ok", res.ok)
out = {c: sorted(v) for c, v in seen.items()}
json.dump(out, open("/tmp/compat.json","w"), indent=1)
for c, v in out.items():
    d = collections.defaultdict(list)
    for k, ver in v: d[k].append(ver)
    print(c, dict(d))
