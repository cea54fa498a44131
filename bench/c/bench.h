/*
 * Shared by the benchmark's sender and receiver: the body layout both sides
 * agree on, and the clocks they read.
 *
 * Every message carries a 100-byte body encoded as the message's last section,
 * so the receiver finds it in the last BODY_SIZE bytes of the raw delivery
 * without decoding the message; that keeps the clients cheap enough never to
 * be what limits a measurement.  The sender writes its CLOCK_MONOTONIC send
 * time into the body; sender and receiver run on the same host, so the
 * receiver's clock minus that stamp is the one-way latency.
 */
#ifndef BENCH_H
#define BENCH_H

#include <proton/condition.h>
#include <proton/connection.h>
#include <proton/event.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define BODY_SIZE 100
#define BODY_MAGIC 0x314e4252u /* "RBN1": tells a benchmark body from anything else */

/* Body layout: magic, then sequence number, then send time, then zero padding. */
typedef struct body_t {
  uint32_t magic;
  uint32_t pad;
  uint64_t seq;
  int64_t sent_ns;
} body_t;

static inline int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* User plus system CPU seconds this process used, so the bench can show the
 * clients had headroom. */
static inline double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Reports a peer's error condition; returns true if there was one. */
static inline bool report_condition(pn_event_t *e, pn_condition_t *cond) {
  if (!pn_condition_is_set(cond)) return false;
  fprintf(stderr, "%s: %s: %s\n", pn_event_type_name(pn_event_type(e)),
          pn_condition_get_name(cond), pn_condition_get_description(cond));
  return true;
}

#endif
