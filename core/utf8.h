/*
 * core/utf8.h — strict UTF-8, as RFC 3629 §4 defines it and Unicode 15 Table 3-7 ("Well-Formed
 * UTF-8 Byte Sequences") lists it: no overlong forms, no surrogates (U+D800..DFFF), nothing above
 * U+10FFFF. Prefix utf8_. One home for what the safetensors reader (header, names, metadata), the
 * model server (request bodies, what a stream may emit, U+FFFD substitution) and the gateway (key
 * admin bodies, PII guard windows) check.
 */
#ifndef MT_UTF8_H
#define MT_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length (1..4) of the valid, complete UTF-8 sequence starting at s[0..n), or 0 if the bytes there
 * are invalid or incomplete (n == 0 gives 0). */
int utf8_seq_len(const uint8_t *s, size_t n);

/* 1 if s[0..n) is entirely valid UTF-8, else 0. */
int utf8_valid(const uint8_t *s, size_t n);

/* The offset of the first byte of s[0..n) that does not start a valid, complete sequence, or -1
 * when all of s is valid UTF-8 (what an error message points at). */
long utf8_invalid_at(const uint8_t *s, size_t n);

/* Length (>= 1; n >= 1) of the maximal subpart at an invalid position s: the longest start of a
 * well-formed sequence there, which one U+FFFD replaces (Unicode 15 §3.9, "U+FFFD Substitution of
 * Maximal Subparts", as Python and WHATWG decoders do). */
size_t utf8_maximal_subpart(const uint8_t *s, size_t n);

/* Number of bytes (0..3) at the end of s[0..n) that form the valid beginning of a UTF-8 sequence
 * still missing its last byte(s) — what a streamer holds back until the next token completes it. */
size_t utf8_incomplete_tail(const uint8_t *s, size_t n);

#endif /* MT_UTF8_H */
