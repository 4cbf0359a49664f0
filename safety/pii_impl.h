/*
 * safety/pii_impl.h — what safety/pii.c (the engine: modes, streaming, API) and
 * safety/pii_recognizers.c (the recognizers) share. Not part of the module's face (safety/pii.h);
 * tests include it to reach the validators and the small-buffer scrubber directly.
 *
 * The contract between the two files, which is what lets the stream scrubber give the same
 * output as the in-memory one whatever the read boundaries:
 *   - a recognizer triggered at byte i reads no byte before i - PII_LOOKBEHIND and none at or
 *     after i + PII_REACH (it is also clipped by the buffer's end, which callers only allow at
 *     the true end of input);
 *   - a match starts at or after its trigger and ends at most PII_REACH bytes after it.
 */
#ifndef MT_PII_IMPL_H
#define MT_PII_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "safety/pii.h"

#define PII_LOOKBEHIND 128u        /* bytes of already-written text the recognizers may read */
#define PII_REACH (PII_MAX_SPAN - 64u) /* furthest a recognizer reads past its trigger */

/* Find the first match whose trigger lies in [pos, hi) (hi <= len), reading b[0..len) (bytes
 * before pos are context: already decided text). Returns 1 and fills *m, or 0 when none. */
int pii_next(const uint8_t *b, size_t len, size_t pos, size_t hi, unsigned types, pii_span *m);

/* The same without the anchor prefilter (every trigger tried): the reference pii_next must
 * agree with, for the tests. */
int pii_next_exact(const uint8_t *b, size_t len, size_t pos, size_t hi, unsigned types,
                   pii_span *m);

/* Validators, exposed for the unit tests. Each takes the characters without separators. */
int pii_luhn_ok(const uint8_t *digits, size_t n);            /* ASCII digits */
int pii_card_iin_ok(const uint8_t *digits, size_t n);        /* known network, right length */
int pii_iban_ok(const uint8_t *s, size_t n);                 /* country length + mod-97 == 1 */
int pii_cnid_ok(const uint8_t *s);                           /* 18 chars, check digit, date */
int pii_ssn_ok(int area, int group, int serial);

/* A push scrubber with a buffer of `bufsize` bytes (>= PII_MAX_SPAN + PII_LOOKBEHIND + 1);
 * pii_scrubber_new uses 4 MiB + PII_MAX_SPAN. Tests use small ones to move every read boundary
 * across the matches. */
pii_scrubber *pii_scrubber_new_sized(pii_mode mode, unsigned types, const uint8_t *hash_key,
                                     size_t keylen, pii_write_fn write, void *ctx, size_t bufsize);

#endif /* MT_PII_IMPL_H */
