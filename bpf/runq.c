//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Runqueue waits: the time a lab's threads were runnable and not running,
 * as intervals, from the scheduler's own tracepoints (host/hostlost/runq).
 * A thread woken (or preempted while still runnable) starts waiting; the
 * switch that puts it on a CPU ends the wait, and the interval goes to the
 * ring for user space to intersect with the switch ports' idle periods:
 * the time the host kept a sender or a softirq from running while the
 * fabric had nothing to send. Schedstat's run_delay is the same total,
 * without the times.
 *
 * Which threads: every thread of the processes in watched (by tgid), and
 * any thread whose tgid is there (a kernel thread's tgid is its pid: the
 * ksoftirqd threads).
 *
 * With track_blocked set, a watched thread's uninterruptible sleeps go to
 * the ring too (kind RUNQ_BLOCKED), from its switch out in D state to its
 * wakeup: the kernel lock or I/O it waited on (rtnl_lock behind another
 * namespace's teardown), host time that is not a runqueue wait.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char __license[] SEC("license") = "Dual BSD/GPL";

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)
struct task_struct {
	int pid;
	int tgid;
};
#pragma clang attribute pop

#define TASK_RUNNING 0
#define TASK_UNINTERRUPTIBLE 0x2
#define TASK_NOLOAD 0x400 /* with UNINTERRUPTIBLE: TASK_IDLE, an idle kthread */

enum runq_kind {
	RUNQ_WAIT = 0,    /* runnable, not running */
	RUNQ_BLOCKED = 1, /* asleep uninterruptibly */
};

/* Set at load time: also log uninterruptible sleeps. */
volatile const __u8 track_blocked = 0;

/* One wait, as the ring carries it. */
struct runq_wait {
	__u64 from_ns; /* CLOCK_MONOTONIC */
	__u64 to_ns;
	__u32 tid;
	__u32 tgid;
	__u32 kind; /* enum runq_kind */
	__u32 pad;
};

/* Puts struct runq_wait in the BTF for bpf2go's -type. */
const struct runq_wait *runq_wait_btf __attribute__((unused));

/* Counters: waits (and blocked sleeps) written, and lost to a full ring
 * or a full table. */
struct runq_stats {
	__u64 waits;
	__u64 ring_lost;
	__u64 table_full;
	__u64 blocked;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32); /* tgid */
	__type(value, __u8);
} watched SEC(".maps");

/* Threads waiting now: tid -> since when. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u64);
} waiting SEC(".maps");

/* Threads asleep uninterruptibly now (track_blocked): tid -> since when. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u64);
} blocked SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} waits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct runq_stats);
} stats SEC(".maps");

static __always_inline int is_watched(const struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);

	return bpf_map_lookup_elem(&watched, &tgid) != NULL;
}

static __always_inline void wait_begin(const struct task_struct *p)
{
	__u32 zero = 0, tid = BPF_CORE_READ(p, pid);
	__u64 now = bpf_ktime_get_ns();
	struct runq_stats *st;

	if (bpf_map_update_elem(&waiting, &tid, &now, BPF_ANY)) {
		st = bpf_map_lookup_elem(&stats, &zero);
		if (st)
			st->table_full++;
	}
}

/* emit puts one interval on the ring. */
static __always_inline void emit(__u64 from, __u64 to, __u32 tid, __u32 tgid, __u32 kind)
{
	__u32 zero = 0;
	struct runq_stats *st;
	struct runq_wait *w;

	st = bpf_map_lookup_elem(&stats, &zero);
	if (!st)
		return;
	w = bpf_ringbuf_reserve(&waits, sizeof(*w), 0);
	if (!w) {
		st->ring_lost++;
		return;
	}
	w->from_ns = from;
	w->to_ns = to;
	w->tid = tid;
	w->tgid = tgid;
	w->kind = kind;
	w->pad = 0;
	/* The reader polls: a wakeup per wait would make waits of its own
	 * (a ring half full wakes it). */
	bpf_ringbuf_submit(w, bpf_ringbuf_query(&waits, BPF_RB_AVAIL_DATA) > (1 << 19) ? BPF_RB_FORCE_WAKEUP
											: BPF_RB_NO_WAKEUP);
	if (kind == RUNQ_BLOCKED)
		st->blocked++;
	else
		st->waits++;
}

/* sched_wakeup(struct task_struct *p) */
SEC("tp_btf/sched_wakeup")
int runq_wakeup(__u64 *ctx)
{
	const struct task_struct *p = (const void *)ctx[0];
	__u32 tid;
	__u64 *since;

	if (!p || !is_watched(p))
		return 0;
	if (track_blocked) {
		tid = BPF_CORE_READ(p, pid);
		since = bpf_map_lookup_elem(&blocked, &tid);
		if (since) {
			emit(*since, bpf_ktime_get_ns(), tid, BPF_CORE_READ(p, tgid), RUNQ_BLOCKED);
			bpf_map_delete_elem(&blocked, &tid);
		}
	}
	wait_begin(p);
	return 0;
}

/* sched_wakeup_new(struct task_struct *p) */
SEC("tp_btf/sched_wakeup_new")
int runq_wakeup_new(__u64 *ctx)
{
	const struct task_struct *p = (const void *)ctx[0];

	if (p && is_watched(p))
		wait_begin(p);
	return 0;
}

/* sched_switch(bool preempt, struct task_struct *prev, struct task_struct
 * *next, unsigned int prev_state) */
SEC("tp_btf/sched_switch")
int runq_switch(__u64 *ctx)
{
	const struct task_struct *prev = (const void *)ctx[1];
	const struct task_struct *next = (const void *)ctx[2];
	unsigned int prev_state = (unsigned int)ctx[3];
	__u64 *since, from, now;
	__u32 tid;

	if (prev && is_watched(prev)) {
		/* Preempted, still runnable: it waits from now. */
		if (prev_state == TASK_RUNNING) {
			wait_begin(prev);
		} else {
			/* Off to sleep (or preempted on its way there): no wait
			 * until a wakeup. A wakeup of it while it still ran (its
			 * own, or one racing its sleep) left an entry that would
			 * date the next switch-in from then. */
			tid = BPF_CORE_READ(prev, pid);
			bpf_map_delete_elem(&waiting, &tid);
			if (track_blocked && (prev_state & TASK_UNINTERRUPTIBLE) && !(prev_state & TASK_NOLOAD)) {
				now = bpf_ktime_get_ns();
				if (bpf_map_update_elem(&blocked, &tid, &now, BPF_ANY)) {
					__u32 zero = 0;
					struct runq_stats *st = bpf_map_lookup_elem(&stats, &zero);

					if (st)
						st->table_full++;
				}
			}
		}
	}
	if (!next || !is_watched(next))
		return 0;
	tid = BPF_CORE_READ(next, pid);
	since = bpf_map_lookup_elem(&waiting, &tid);
	if (!since)
		return 0;
	from = *since;
	bpf_map_delete_elem(&waiting, &tid);
	emit(from, bpf_ktime_get_ns(), tid, BPF_CORE_READ(next, tgid), RUNQ_WAIT);
	return 0;
}
