/*
 * safety/pii.h — PII scrubbing of text: find personal data and secrets, replace them with typed
 * placeholders, keyed hashes, or drop the lines that hold them.
 *
 * Recognizers (each validated beyond its shape, see safety/pii.c and docs/safety.md):
 *   email   RFC 5322 practical subset (ASCII local part, dotted domain with an alphabetic TLD)
 *   phone   E.164 (+CC...), NANP ((415) 555-2671, 415-555-2671), PRC mobile ((+86)1[3-9]\d{9})
 *   card    13-19 digits, plain or grouped by spaces/dashes, Luhn-valid, in a known IIN range
 *   iban    ISO 13616: per-country length + mod-97 == 1, compact or grouped by four
 *   ipv4    dotted quad, each octet <= 255, not part of a longer dotted number (versions)
 *   ipv6    RFC 4291 text forms incl. '::' and an embedded IPv4 tail; not '::' alone
 *   ssn     US SSN ddd-dd-dddd: area not 000/666/9xx, group not 00, serial not 0000
 *   cnid    PRC resident ID (GB 11643-1999): 18 chars, ISO 7064 MOD 11-2 check, valid birth date
 *   secret  AWS access key ids (AKIA...), sk-... API keys, PEM private key blocks,
 *           password=/token=... assignments, user:password@ in URLs
 * Boundaries are byte classes, not \b: any byte >= 0x80 (CJK, invalid UTF-8) and NUL count as a
 * boundary, so "手机13812345678号" and "卡号4111111111111111谢谢" are found.
 *
 * Two entry points share one engine and give the same output for the same bytes:
 *   pii_scrub_text    a buffer in, a malloc'd buffer out (the gateway's prompts/completions)
 *   pii_scrubber_*    push bytes in any pieces, get output through a callback, bounded memory
 *                     (`minitrain scrub` on training corpora of any size, cmd/scrub.c)
 * No function prints; none keeps a global state; all are safe to call from several threads on
 * different objects.
 */
#ifndef MT_PII_H
#define MT_PII_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The recognizer types; bit (1u << t) of a type mask selects type t. */
typedef enum {
    PII_EMAIL = 0,
    PII_PHONE,
    PII_CARD,
    PII_IBAN,
    PII_IPV4,
    PII_IPV6,
    PII_SSN,
    PII_CNID,
    PII_SECRET,
    PII_NTYPES
} pii_type;

#define PII_ALL ((1u << PII_NTYPES) - 1u)

/* What to do with a match.
 *   PII_MASK       replace with the type's placeholder: <EMAIL>, <PHONE>, <CARD>, <IBAN>,
 *                  <IPV4>, <IPV6>, <SSN>, <CNID>, <SECRET>
 *   PII_HASH       replace with <TYPE:8 hex>, the first 4 bytes of HMAC-SHA256(key, "type:" +
 *                  canonical form) — the same value gives the same token (separators in numbers
 *                  and the case of emails do not matter); needs a key (keylen > 0)
 *   PII_DROP_LINE  remove every line (up to and including its '\n') that holds a match */
typedef enum { PII_MASK = 0, PII_HASH, PII_DROP_LINE } pii_mode;

/* Counts of one scrub. Never holds matched text. */
typedef struct {
    uint64_t found[PII_NTYPES]; /* matches per type */
    uint64_t bytes_in;          /* bytes read */
    uint64_t bytes_out;         /* bytes written */
    uint64_t lines_dropped;     /* PII_DROP_LINE: lines removed */
    uint64_t long_lines_masked; /* PII_DROP_LINE: lines longer than PII_LINE_MAX that held a match
                                   after their first PII_LINE_MAX bytes had been written; their
                                   matches were masked instead (memory stays bounded) */
} pii_counts;

#define PII_LINE_MAX (1u << 20) /* drop-line mode holds at most this many bytes of one line */
#define PII_MAX_SPAN (1u << 16) /* longest match (a PEM block); the stream keeps this much
                                   look-ahead, so a match across a read boundary is still found */

/* A match: bytes [start, end) of the input, of the given type. */
typedef struct {
    size_t start, end;
    pii_type type;
} pii_span;

/* "email", "phone", ... (the names pii_types_parse accepts); NULL for an out-of-range t. */
const char *pii_type_name(pii_type t);

/* "<EMAIL>", "<PHONE>", ...; NULL for an out-of-range t. */
const char *pii_type_placeholder(pii_type t);

/* Parse a comma-separated list of type names ("email,phone", "all", "ip" = ipv4,ipv6; spaces
 * around names allowed) into a type mask. Returns the mask, or 0 with a one-line reason in
 * err[0..errlen) (err may be NULL) for an unknown or empty name. */
unsigned pii_types_parse(const char *csv, char *err, size_t errlen);

/* Parse "mask" | "hash" | "drop-line" into *mode. Returns 0, or -1 for anything else. */
int pii_mode_parse(const char *s, pii_mode *mode);

/* "mask" | "hash" | "drop-line". */
const char *pii_mode_name(pii_mode mode);

/* Find the matches in in[0..n) of the types in the mask, leftmost first, non-overlapping.
 * Writes up to max_spans into spans (may be NULL when max_spans is 0) and returns how many
 * there are in all (may exceed max_spans). */
size_t pii_find(const char *in, size_t n, unsigned types, pii_span *spans, size_t max_spans);

/* Scrub in[0..n) (any bytes: NUL and invalid UTF-8 are fine) and return a malloc'd copy with the
 * matches replaced (the caller frees it), NUL-terminated for convenience, its length in *out_len
 * (may be NULL). counts (may be NULL) receives the counts of this call (overwritten, not added).
 * Returns NULL when mode is PII_HASH and keylen is 0, when types has no known bit, or when memory
 * runs out (errno = EINVAL or ENOMEM). */
char *pii_scrub_text(const char *in, size_t n, pii_mode mode, unsigned types,
                     const uint8_t *hash_key, size_t keylen, pii_counts *counts, size_t *out_len);

/* Output callback of the push scrubber: write p[0..n); return 0, or non-zero to stop (the
 * scrubber then returns -1 from push/finish). */
typedef int (*pii_write_fn)(void *ctx, const char *p, size_t n);

typedef struct pii_scrubber pii_scrubber;

/* A push scrubber: bytes go in through pii_scrubber_push in pieces of any size, scrubbed bytes
 * come out through write(ctx, ...) — held back by up to PII_MAX_SPAN bytes (plus, in drop-line
 * mode, the current line up to PII_LINE_MAX) until more input or pii_scrubber_finish decides them.
 * Memory is bounded (about 1 MiB + PII_MAX_SPAN, + PII_LINE_MAX in drop-line mode) whatever the
 * input. The key is copied. Returns NULL on the same conditions as pii_scrub_text. */
pii_scrubber *pii_scrubber_new(pii_mode mode, unsigned types, const uint8_t *hash_key,
                               size_t keylen, pii_write_fn write, void *ctx);

/* Feed p[0..n). Returns 0, or -1 when the write callback failed. */
int pii_scrubber_push(pii_scrubber *s, const char *p, size_t n);

/* End of input: scrub and write what is held back. Returns 0, or -1 when a write failed. */
int pii_scrubber_finish(pii_scrubber *s);

/* The counts so far (bytes_out counts what the callback has been given). */
const pii_counts *pii_scrubber_counts(const pii_scrubber *s);

void pii_scrubber_free(pii_scrubber *s);

/* The report of a scrub as a JSON object (malloc'd, NUL-terminated; the caller frees it):
 * {"mode":..., "types":[...], "bytes_in":..., "bytes_out":..., "lines_dropped":...,
 *  "long_lines_masked":..., "total":..., "counts":{"email":N, ...}, "seconds":..., "mb_per_s":...}.
 * Counts only, never matched text. seconds < 0 leaves out the timing fields. NULL on ENOMEM. */
char *pii_report_json(const pii_counts *c, pii_mode mode, unsigned types, double seconds);

/* Read an HMAC key file for PII_HASH: its bytes with one trailing "\n" (or "\r\n") removed,
 * 1..4096 bytes, into a malloc'd *key (the caller wipes and frees it). Returns 0, or -1 with a
 * one-line reason naming the file in err[0..errlen). */
int pii_key_load(const char *path, uint8_t **key, size_t *keylen, char *err, size_t errlen);

#endif /* MT_PII_H */
