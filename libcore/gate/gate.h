/* gate.h - what capy-gate needs beside the engine: the identity of a model that a reference
 * was recorded on, a capy-serve started as a child process on a free loopback port, and a
 * one-request HTTP client to talk to it.
 *
 *	struct capy_gate_identity id;
 *	capy_gate_identity(artifact, &id, &err);	// family and weights checksum
 *	struct capy_gate_server srv;
 *	char *argv[] = { "capy-serve", "m.capy", "--profile", "agent", "--port", "0", NULL };
 *	capy_gate_server_start(&srv, "/usr/bin/capy-serve", argv, "/tmp/serve.log", 60, &err);
 *	capy_gate_http_post(srv.port, "/v1/chat/completions", body, len, 120, &resp, &err);
 *	capy_gate_server_stop(&srv, 15);
 *
 * Thread-safety: none needed (one caller); the server's child process is the caller's to
 * stop (capy_gate_server_stop), also on its error paths.
 */
#ifndef CAPY_GATE_H
#define CAPY_GATE_H

#include "../util/err.h"

#include <sys/types.h>

struct capy_artifact;

/* What makes two artifacts the same model for a reference: the family and an XXH3-64 over
 * every tensor's and embedded file's name and checksum, in directory order (the weights, the
 * tokenizer, the template and the configs; not the converter's version or the file's name). */
struct capy_gate_identity {
	char family[32];
	char weights_xxh3[17]; /* 16 hex digits */
};

int capy_gate_identity(const struct capy_artifact *a, struct capy_gate_identity *out, struct capy_err *err);

/* A server child: its pid, its port once it listens, its stderr file. */
struct capy_gate_server {
	pid_t pid;  /* 0: none */
	int port;
	char *log_path; /* copied */
};

/* Start argv[0..] as bin (stdin and stdout /dev/null, stderr appended to log_path; the child
 * gets SIGTERM should the caller die) and wait up to timeout_s for its startup line
 * "...: serving ... on http://HOST:PORT on ..." in the log. Fails with the log's last line when
 * the child exits or says nothing in time (the child is then stopped). */
int capy_gate_server_start(struct capy_gate_server *s, const char *bin, char *const argv[], const char *log_path,
			   double timeout_s, struct capy_err *err);
/* SIGTERM, wait up to timeout_s, then SIGKILL. Returns the child's exit status (0..255), 128 +
 * the signal that ended it, or -1 when it had to be killed. Safe on a stopped or unstarted one. */
int capy_gate_server_stop(struct capy_gate_server *s, double timeout_s);

/* A response: its status and body (malloc'd, NUL-terminated). */
struct capy_gate_response {
	int status;
	char *body;
	size_t len;
};

/* POST body (application/json) to http://127.0.0.1:port/path with Connection: close, waiting
 * at most timeout_s in all; the body de-chunked when sent chunked. */
int capy_gate_http_post(int port, const char *path, const char *body, size_t len, double timeout_s,
			struct capy_gate_response *out, struct capy_err *err);
void capy_gate_response_release(struct capy_gate_response *r);

/* --- the stages ---------------------------------------------------------------------------
 *
 * Each stage compares what the model does now with what a reference directory holds (or,
 * recording, writes it there), and says PASS, FAIL or WARN with one line. The files of a
 * reference (docs/gate.md): model.json (the model's identity), golden.json (prompts, their ids
 * and greedy ids), ppl.tsv and ppl-text.txt (the per-window table as capy-ppl prints it, the
 * exact NLL sums), greedy.json (request bodies and capy-serve's answers), timing.json.
 * A stage fails with CAPY_EFORMAT and g->bad_ref set when the reference is malformed or missing
 * (the message names the file and the field); any other error is the work failing. */

enum capy_gate_verdict { CAPY_GATE_PASS, CAPY_GATE_WARN, CAPY_GATE_FAIL, CAPY_GATE_RECORDED };

const char *capy_gate_verdict_name(enum capy_gate_verdict v);

struct capy_gate_report {
	enum capy_gate_verdict verdict;
	char line[4096]; /* after "<stage> <VERDICT> ": one line (control characters escaped) */
};

/* Speeds the stages measured (0: not measured). */
struct capy_gate_timing {
	double prefill_tok_s, decode_tok_s; /* golden: prompts, generated ids */
	double ppl_tok_s;                   /* ppl: tokens through the model */
	double greedy_s;                    /* greedy: the requests' wall time (server started) */
};

struct capy_assets;
struct capy_engine;

struct capy_gate {
	const char *model_path;
	const struct capy_artifact *a;
	const struct capy_assets *as;
	struct capy_engine *e; /* golden and ppl run here */
	const char *ref_dir;
	bool record;
	bool paired;              /* ppl: the paired test instead of equal digits */
	const char *ppl_text;     /* ppl, recording: the text (copied into the reference) */
	const char *serve_bin;    /* greedy: the capy-serve to start */
	const char *device;       /* greedy: its --device ("cpu", "cuda") */
	int gpu;                  /* greedy: its --gpu with a device other than the CPU */
	int threads;              /* greedy: its --threads (0: its default) */
	const char *tmp_dir;      /* greedy: where its log goes */
	double timing_tolerance;  /* timing: WARN when slower by more than this fraction */
	struct capy_gate_timing timing; /* filled by the stages that ran */
	bool bad_ref;             /* set with a CAPY_EFORMAT error about the reference */
	char ref_isa[16];         /* capy_gate_model: the reference's CPU kernels ("": not said) */
};

/* model.json: check that the reference was recorded on this model (the family and the
 * identity) and say in g->ref_isa with which CPU kernels, or, recording, write it (the kernels
 * in force: capy_isa_get()). */
int capy_gate_model(struct capy_gate *g, struct capy_err *err);
int capy_gate_golden(struct capy_gate *g, struct capy_gate_report *r, struct capy_err *err);
int capy_gate_ppl(struct capy_gate *g, struct capy_gate_report *r, struct capy_err *err);
int capy_gate_greedy(struct capy_gate *g, struct capy_gate_report *r, struct capy_err *err);
/* Reported against timing.json; never FAIL. Uses g->timing, so it runs last. */
int capy_gate_timing(struct capy_gate *g, struct capy_gate_report *r, struct capy_err *err);

#endif
