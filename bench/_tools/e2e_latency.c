/*
 * e2e_latency: end-to-end latency at a fixed rate, against librdkafka's public API.
 *
 *   e2e_latency BOOTSTRAP TOPIC RATE_MSG_PER_S SECONDS MSG_SIZE WARMUP_S [prop=value ...]
 *
 * One process, two clients: a producer paced open-loop (every millisecond it sends the
 * records that the schedule says are due; it sleeps between ticks, no busy loop) and a
 * consumer thread reading partition 0 with the simple (assign, no group) consumer. Each
 * record carries its *scheduled* send time (CLOCK_MONOTONIC ns) and a sequence number, so
 * a producer that falls behind shows up as latency instead of being hidden (no
 * coordinated omission). Latency = consumer receive time - scheduled send time.
 * Records scheduled in the first WARMUP_S seconds are left out of the percentiles.
 * prop=value pairs go to the producer ("p.") or consumer ("c.") or both (no prefix).
 *
 * Prints one JSON object: sent, received, achieved MB/s, p50/p99/p99.9/max in ms.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rdkafka.h"

static int64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t *lat_ns;      /* indexed by sequence number, -1 = not received */
static int64_t total;        /* records to send */
static volatile int64_t received;
static volatile int stop_consumer;
static int64_t start_offset;
static rd_kafka_t *crk;
static rd_kafka_topic_t *crkt;
static int64_t delivery_errors;

static void die(const char *what, const char *why) {
        fprintf(stderr, "e2e_latency: %s: %s\n", what, why);
        exit(1);
}

static void set(rd_kafka_conf_t *conf, const char *k, const char *v) {
        char err[512];
        if (rd_kafka_conf_set(conf, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK)
                die(k, err);
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
        (void)rk;
        (void)opaque;
        if (m->err)
                delivery_errors++;
}

static void on_message(rd_kafka_message_t *m, void *opaque) {
        (void)opaque;
        int64_t t = now_ns();
        if (!m->err && m->len >= 16) {
                int64_t sched, seq;
                memcpy(&sched, m->payload, 8);
                memcpy(&seq, (char *)m->payload + 8, 8);
                if (seq >= 0 && seq < total && lat_ns[seq] < 0) {
                        lat_ns[seq] = t - sched;
                        received++;
                }
        }
}

static void *consumer_main(void *arg) {
        (void)arg;
        if (rd_kafka_consume_start(crkt, 0, start_offset) == -1)
                die("consume_start", rd_kafka_err2str(rd_kafka_last_error()));
        /* consume_callback hands over whatever is queued as soon as anything is (a
         * batch call would wait to fill its batch and add that wait to the latency). */
        while (!stop_consumer && received < total)
                rd_kafka_consume_callback(crkt, 0, 100, on_message, NULL);
        rd_kafka_consume_stop(crkt, 0);
        return NULL;
}

static int cmp64(const void *a, const void *b) {
        int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
        return (x > y) - (x < y);
}

int main(int argc, char **argv) {
        if (argc < 7) {
                fprintf(stderr,
                        "usage: %s BOOTSTRAP TOPIC RATE SECONDS MSG_SIZE WARMUP_S "
                        "[p.|c.]prop=value...\n",
                        argv[0]);
                return 2;
        }
        const char *bootstrap = argv[1], *topic = argv[2];
        double rate = atof(argv[3]), seconds = atof(argv[4]);
        int size = atoi(argv[5]);
        double warmup = atof(argv[6]);
        char err[512];
        if (size < 16)
                size = 16;
        total = (int64_t)(rate * seconds);
        lat_ns = malloc(sizeof(*lat_ns) * (size_t)total);
        for (int64_t i = 0; i < total; i++)
                lat_ns[i] = -1;

        rd_kafka_conf_t *pconf = rd_kafka_conf_new(), *cconf = rd_kafka_conf_new();
        set(pconf, "bootstrap.servers", bootstrap);
        set(cconf, "bootstrap.servers", bootstrap);
        set(cconf, "enable.partition.eof", "false");
        for (int i = 7; i < argc; i++) {
                char *kv = strdup(argv[i]), *eq = strchr(kv, '=');
                if (!eq)
                        die("bad property", argv[i]);
                *eq = '\0';
                const char *k = kv;
                if (!strncmp(k, "p.", 2))
                        set(pconf, k + 2, eq + 1);
                else if (!strncmp(k, "c.", 2))
                        set(cconf, k + 2, eq + 1);
                else {
                        set(pconf, k, eq + 1);
                        set(cconf, k, eq + 1);
                }
                free(kv);
        }
        rd_kafka_conf_set_dr_msg_cb(pconf, dr_cb);

        if (!(crk = rd_kafka_new(RD_KAFKA_CONSUMER, cconf, err, sizeof(err))))
                die("consumer", err);
        crkt = rd_kafka_topic_new(crk, topic, NULL);
        int64_t lo = 0, hi = 0;
        rd_kafka_resp_err_t e =
            rd_kafka_query_watermark_offsets(crk, topic, 0, &lo, &hi, 10000);
        if (e)
                die("query_watermark_offsets", rd_kafka_err2str(e));
        start_offset = hi;

        rd_kafka_t *prk = rd_kafka_new(RD_KAFKA_PRODUCER, pconf, err, sizeof(err));
        if (!prk)
                die("producer", err);
        rd_kafka_topic_t *prkt = rd_kafka_topic_new(prk, topic, NULL);
        /* Warm the producer's connection and metadata before the clock starts. */
        {
                struct rd_kafka_metadata const *md;
                rd_kafka_metadata(prk, 0, prkt, &md, 10000);
                if (md)
                        rd_kafka_metadata_destroy(md);
        }

        pthread_t thr;
        pthread_create(&thr, NULL, consumer_main, NULL);
        {
                struct timespec ts = {0, 500 * 1000000L}; /* let the consumer fetch */
                nanosleep(&ts, NULL);
        }

        char *buf = calloc(1, (size_t)size);
        memset(buf + 16, 'x', (size_t)size - 16);
        int64_t t0 = now_ns(), sent = 0, tick = 0, last_sent_at = t0;
        double ns_per_msg = 1e9 / rate;
        while (sent < total) {
                int64_t now = now_ns();
                int64_t due = (int64_t)((double)(now - t0) / ns_per_msg) + 1;
                if (due > total)
                        due = total;
                while (sent < due) {
                        int64_t sched = t0 + (int64_t)((double)sent * ns_per_msg);
                        memcpy(buf, &sched, 8);
                        memcpy(buf + 8, &sent, 8);
                        if (rd_kafka_produce(prkt, 0, RD_KAFKA_MSG_F_COPY, buf,
                                             (size_t)size, NULL, 0, NULL) == -1) {
                                if (rd_kafka_last_error() ==
                                    RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                                        rd_kafka_poll(prk, 1);
                                        continue;
                                }
                                die("produce",
                                    rd_kafka_err2str(rd_kafka_last_error()));
                        }
                        sent++;
                }
                last_sent_at = now_ns();
                rd_kafka_poll(prk, 0);
                tick++;
                struct timespec next;
                int64_t wake = t0 + tick * 1000000LL; /* 1 ms ticks */
                next.tv_sec = wake / 1000000000LL;
                next.tv_nsec = wake % 1000000000LL;
                clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        }
        double send_s = (double)(last_sent_at - t0) / 1e9;
        rd_kafka_flush(prk, 60000);

        int64_t deadline = now_ns() + 30LL * 1000000000LL;
        while (received < total && now_ns() < deadline) {
                struct timespec ts = {0, 10 * 1000000L};
                nanosleep(&ts, NULL);
        }
        stop_consumer = 1;
        pthread_join(thr, NULL);

        int64_t skip = (int64_t)(rate * warmup), n = 0;
        int64_t *v = malloc(sizeof(*v) * (size_t)total);
        for (int64_t i = skip; i < total; i++)
                if (lat_ns[i] >= 0)
                        v[n++] = lat_ns[i];
        qsort(v, (size_t)n, sizeof(*v), cmp64);
#define PCT(q) (n ? (double)v[(int64_t)((q) * (double)(n - 1))] / 1e6 : -1.0)
        printf("{\"sent\": %" PRId64 ", \"received\": %" PRId64
               ", \"delivery_errors\": %" PRId64 ", \"measured\": %" PRId64
               ", \"send_seconds\": %.3f, \"achieved_mb_s\": %.2f, \"p50\": %.3f, "
               "\"p99\": %.3f, \"p999\": %.3f, \"max\": %.3f}\n",
               sent, (int64_t)received, delivery_errors, n, send_s,
               send_s > 0 ? (double)sent * size / send_s / 1e6 : 0.0, PCT(0.5),
               PCT(0.99), PCT(0.999), n ? (double)v[n - 1] / 1e6 : -1.0);
        rd_kafka_topic_destroy(prkt);
        rd_kafka_destroy(prk);
        rd_kafka_topic_destroy(crkt);
        rd_kafka_destroy(crk);
        return received < total ? 3 : 0;
}
