/* net.h - ember's network layer: epoll event loops, non-blocking TCP sockets,
 * per-connection input buffers and output queues, backpressure and timers.
 *
 * One loop per worker thread; every loop waits on the one listening socket
 * (EPOLLEXCLUSIVE, so one worker wakes per pending connection) and hands each
 * accepted connection to the loop owning the fewest, which then owns it.  net/ knows nothing about the protocol: the layer
 * above registers callbacks (net_callbacks) that consume input bytes and
 * append replies to the connection's output buffer (STYLE.md habit 1).
 */
#ifndef EM_NET_H
#define EM_NET_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/mem.h"

typedef struct net_server net_server;
typedef struct net_conn net_conn;

typedef struct net_limits {
    uint32_t max_conns;           /* accepted beyond this are closed at once (0 = no cap) */
    uint32_t handshake_timeout_ms;/* close if not established by then (0 = off) */
    uint32_t idle_timeout_ms;     /* close after this long without input (0 = off) */
    uint32_t write_stall_ms;      /* close if queued output makes no progress this long (0 = off) */
    size_t   out_soft_cap;        /* stop reading while more than this is queued */
    size_t   out_hard_cap;        /* close a connection whose queue exceeds this */
    /* peer: both ends of a connection send on their own, not only in
     * answer: reading never stops for queued output (two peers each
     * waiting for the other to read would wait for good); out_hard_cap
     * still closes a connection whose peer does not read. */
    int      peer;
} net_limits;

/* Callbacks from the loops to the layer above.  All run on the worker thread
 * that owns the connection; arg is net_callbacks.arg. */
typedef struct net_callbacks {
    void *arg;
    /* on_open: a connection was accepted (or opened, net_connect); returns
     * its state (NULL = close it).  Output appended here to net_conn_out(c)
     * leaves once the socket is writable for an outgoing connection, with the
     * next reply for an accepted one; do not kick from on_open. */
    void *(*on_open)(void *arg, net_conn *c);
    /* on_data: p[0..n) is unconsumed input.  Consume whole messages, append
     * replies to out, stop early once out->len exceeds out_cap, and set
     * *consumed.  Return 0, or negative to close the connection (anything
     * already in out is still sent, best effort, before the close). */
    int (*on_data)(void *arg, net_conn *c, void *state, const uint8_t *p, size_t n,
                   em_buf *out, size_t out_cap, size_t *consumed);
    /* on_close: the connection is gone; free state. */
    void (*on_close)(void *arg, void *state);
    /* before_send (optional): called once per loop pass, on the worker
     * thread, after the pass's input was processed and before any reply
     * produced in it is sent (e.g. a WAL group fsync).  Nonzero = those
     * replies must never leave: their connections are closed. */
    int (*before_send)(void *arg);
    /* on_tls_fail: a TLS handshake failed (optional); the connection closes
     * right after (on_close follows). */
    void (*on_tls_fail)(void *arg, net_conn *c, const char *why);
    /* on_peek / on_peek_done (optional, together): a loop pass first reads
     * one buffer from each readable plaintext connection that has no bytes
     * held, shows each to on_peek (p[0..n) stays valid and unchanged until
     * on_data gets the same bytes; on_peek may only look, e.g. to prefetch),
     * calls on_peek_done once, then runs on_data on each in turn. */
    void (*on_peek)(void *arg, void *state, const uint8_t *p, size_t n);
    void (*on_peek_done)(void *arg);
    /* on_pass_end (optional): once at the end of every loop pass, after
     * all of its input ran (and the tick, when it came): for work batched
     * over a pass, e.g. the replication streams its writes filled. */
    void (*on_pass_end)(void *arg);
    /* on_tick (optional): every timer scan (about 200 ms) on each loop, after
     * the loop's own timeouts; for heartbeats and delayed work. */
    void (*on_tick)(void *arg, int loop, uint64_t now_ms);
    /* on_resume (optional): a parked connection (net_conn_park) may go on:
     * append replies to out as on_data does; negative closes. */
    int (*on_resume)(void *arg, net_conn *c, void *state, em_buf *out, size_t out_cap);
} net_callbacks;

struct net_tls_ctx;

typedef struct net_options {
    const char *host;             /* numeric IPv4/IPv6 address or name; NULL = 127.0.0.1 */
    int         port;             /* 0 = any free port (see net_server_port) */
    int         threads;          /* worker loops; <= 0 = net_default_threads() */
    net_limits  limits;
    net_callbacks cb;
    struct net_tls_ctx *tls;      /* TLS only on this port; NULL = plaintext (borrowed) */
    const char *name;             /* the loop threads' name (top -H, perf); NULL = "em-net" */
} net_options;

/* net_server_start binds and listens, then starts the worker threads.
 * Returns 0 or -errno / EM_NOMEM; on failure nothing is left running. */
int  net_server_start(net_server **out, const net_options *opt);
/* net_default_threads: the loop count for threads <= 0 (one per CPU; one
 * loop on machines with one or two CPUs). */
int  net_default_threads(void);
/* net_server_port: the bound port (useful with port 0). */
int  net_server_port(const net_server *s);
/* net_server_stop closes the listener and every connection (calling
 * on_close), joins the workers and frees the server.  Safe from any thread
 * except a worker. */
void net_server_stop(net_server *s);

/* net_conn_established tells the loop the connection passed its handshake,
 * which disarms the handshake timeout. */
void net_conn_established(net_conn *c);

/* net_conn_worker: index of the worker loop that owns c (0..threads-1). */
int  net_conn_worker(const net_conn *c);

/* net_conn_peer writes the peer address as text ("1.2.3.4:5678"). */
void net_conn_peer(const net_conn *c, char *buf, size_t n);

/* net_mem_stats: allocation counters summed over every worker thread
 * (each worker publishes em_mem_thread() after each event batch; the calling
 * worker's own counters are read live). */
void net_mem_stats(net_server *s, em_mem_stats *sum);

/* net_conn_count: connections open now. */
uint32_t net_conn_count(const net_server *s);

/* ---- for peers: connections this node opens, work from other threads ----
 *
 * net_connect starts a non-blocking connect to a numeric host and port and
 * gives the socket to the least loaded loop, which calls on_open for it like
 * an accepted one (net_conn_ctx(c) == ctx, net_conn_outgoing(c) == 1); a
 * connect that fails shows as that connection closing (on_close).  The
 * server's TLS context applies only to accepted connections.  ctx stays the
 * caller's: nothing is reported for a connect still queued when the server
 * stops.  Returns 0, EM_INVAL for a bad address, -errno, or EM_NOMEM.
 * Any thread. */
int  net_connect(net_server *s, const char *host, int port, void *ctx);

/* net_post runs fn(arg, 0) on loop's thread, after what was posted to it
 * before (FIFO per loop).  If the server stops first, fn(arg, 1) runs on
 * the stopping thread instead, with every connection already closed: it must
 * only free what it owns.  Any thread.  0, EM_INVAL, or EM_NOMEM. */
int  net_post(net_server *s, int loop, void (*fn)(void *arg, int cancelled), void *arg);
/* net_post_needless: 1 when the caller runs on that loop's thread, outside
 * its posted calls, with nothing posted to it waiting - so work done now
 * directly keeps its order with everything posted before (a sender's
 * frames stay in sequence); 0 otherwise (post it). */
int  net_post_needless(net_server *s, int loop);

void *net_conn_ctx(const net_conn *c);
int   net_conn_outgoing(const net_conn *c);

/* net_conn_out / net_conn_kick: output outside on_data, on the owning
 * loop's thread only (a posted call, on_tick, on_open).  Append to the
 * buffer, then kick to send what can go now and arm EPOLLOUT for the rest.
 * kick returns 0, or EM_CLOSED when the connection failed and is now closed
 * (on_close has run). */
em_buf *net_conn_out(net_conn *c);
int     net_conn_kick(net_conn *c);

/* Parking: on_data (or on_resume) may keep requests it cannot run yet (they
 * wait for a lock) and call net_conn_park(c) (owner thread).  The loop then
 * calls on_resume for the connection at the next timer scan (about 200 ms),
 * or sooner after net_wake_parked (any thread: every loop resumes its parked
 * connections once, soon).  No thread sleeps meanwhile: the loop serves its
 * other connections, the parked one's included. */
void    net_conn_park(net_conn *c);
int     net_wake_parked(net_server *s);

/* Shared output, for a connection whose frames other threads write straight
 * to its socket (one syscall, no hand-off to the loop).  net_conn_share
 * (owner thread; plaintext connections only: 0, EM_INVAL, EM_NOMEM) turns
 * it on for good (with two 4 KiB buffers for frames handed between
 * senders); the loop's own sends then take a lock.
 * net_conn_send_any (any thread) writes a[0..an) then b[0..bn) as one
 * whole: sent now when nothing of the loop's is left half-sent, else (or
 * for what the socket did not take) queued, and the loop, woken by
 * EPOLLOUT, sends it next; while another thread is sending on c, it is
 * left to that thread instead (no sender waits for another's send).  One
 * thread's frames keep their order; it may overtake output the loop
 * appended and has not flushed yet.  The caller keeps c alive across the
 * call (it must not overlap on_close).  0, EM_CLOSED (closing, or the
 * socket failed: the loop closes it), EM_TOOBIG (over the hard cap of
 * queued output), EM_NOMEM.  Bytes sent this way are not counted by the
 * loop's write timers.  net_conn_out_idle (owner thread): 1 when none of c's output
 * waits to be sent. */
int     net_conn_share(net_conn *c);
int     net_conn_send_any(net_conn *c, const void *a, size_t an, const void *b, size_t bn);
int     net_conn_out_idle(net_conn *c);

/* net_conn_close closes c from its loop's thread (on_close runs now). */
void    net_conn_close(net_conn *c);

#endif
