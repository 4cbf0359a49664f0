#!/usr/bin/env python3
"""tests/pii_corpus.py — a labelled corpus for the PII scrubber (safety/pii.c).

Writes, into --out DIR:
  corpus.txt      UTF-8 text: Shakespeare lines and Chinese sentences with PII and hard
                  negatives placed in English and Chinese contexts
  labels.tsv      one known PII span per line: start<TAB>end<TAB>type (byte offsets, end
                  exclusive; types as in safety/pii.h: email phone card iban ipv4 ipv6 ssn cnid
                  secret)
  negatives.tsv   the hard negatives placed: start<TAB>end<TAB>kind (for diagnostics only:
                  any match the scrubber reports outside labels.tsv is a false positive)

Independent of the C code on purpose: every valid instance is built here from the standards
(Luhn, ISO 13616 mod-97, GB 11643-1999 MOD 11-2, NANP and SSA rules, Python's ipaddress for
RFC 5952 text) and every negative is made to fail them or to be something else entirely
(timestamps, versions, ISBNs, order ids, git hashes, dates, prices, IPv6-looking hex).

What a span covers (the scrubber's documented policy, docs/safety.md): the whole value for
email, phone (with its +CC or (+86) prefix), card, iban, ip, ssn, cnid; for secrets the key id or
token itself, the value of a password=/token= assignment (without quotes), the user:password of
a URL, the token after "Bearer ", and a PEM private key block from BEGIN to END line.

usage: python3 tests/pii_corpus.py --out DIR [--seed 1] [--per-type 400] [--negatives 4000]
"""
import argparse
import base64
import ipaddress
import os
import random
import string

HERE = os.path.dirname(os.path.abspath(__file__))
SHAKESPEARE = os.path.join(HERE, "..", "examples", "data", "tinyshakespeare.txt")

ZH_FILLER = [
    "今天天气很好，我们去公园散步。", "这个项目的进度比预期要快一些。", "请在下周一之前提交报告。",
    "会议改到下午三点，在二楼会议室。", "他昨天刚从上海出差回来。", "这本书的第三章写得特别好。",
    "训练数据需要先清洗再分词。", "模型的验证损失还在下降。", "我们明天早上九点出发。",
    "如果有问题，请随时联系我。", "价格已经包含运费和税。", "系统将在今晚进行维护。",
    "感谢您的耐心等待。", "请注意保护个人隐私信息。", "这家餐厅的菜很有特色。",
]

EN_NAMES = ["john", "mary", "li.wei", "zhang_san", "o.connor", "alice", "bob", "carol", "dave",
            "eve", "frank", "grace", "heidi", "ivan", "judy", "mallory", "oscar", "peggy",
            "trent", "victor", "walter", "wang.fang", "chen-jie", "x", "a1", "sam+news"]
DOMAINS = ["example.com", "example.org", "mail.example.co.uk", "corp.example.net", "qq.com",
           "163.com", "gmail.com", "sub.domain.example.io", "xn--fiqs8s.example", "uni.edu.cn"]


def luhn_ok(d):
    s = 0
    for k, c in enumerate(reversed(d)):
        x = int(c)
        if k % 2:
            x *= 2
            if x > 9:
                x -= 9
        s += x
    return s % 10 == 0


def luhn_complete(prefix, n, rng):
    body = prefix + "".join(rng.choice(string.digits) for _ in range(n - len(prefix) - 1))
    for c in string.digits:
        if luhn_ok(body + c):
            return body + c
    raise AssertionError


def group(s, sizes, sep):
    out, k = [], 0
    for z in sizes:
        out.append(s[k:k + z])
        k += z
    if k < len(s):
        out.append(s[k:])
    return sep.join(x for x in out if x)


# ---- positives -------------------------------------------------------------------------------

def gen_email(rng):
    local = rng.choice(EN_NAMES)
    if rng.random() < 0.3:
        local += str(rng.randint(1, 9999))
    return local + "@" + rng.choice(DOMAINS)


def nanp_number(rng):
    while True:
        a = str(rng.randint(2, 9)) + str(rng.randint(0, 8)) + str(rng.randint(0, 9))
        e = str(rng.randint(2, 9)) + str(rng.randint(0, 9)) + str(rng.randint(0, 9))
        if a[1:] != "11" and e[1:] != "11":
            return a, e, "%04d" % rng.randint(0, 9999)


def cn_mobile(rng):
    return "1" + str(rng.randint(3, 9)) + "".join(rng.choice(string.digits) for _ in range(9))


def gen_phone(rng):
    k = rng.randrange(12)
    a, e, s = nanp_number(rng)
    m = cn_mobile(rng)
    if k == 0:
        return "+1 (%s) %s-%s" % (a, e, s)
    if k == 1:
        return "+1-%s-%s-%s" % (a, e, s)
    if k == 2:
        return "(%s) %s-%s" % (a, e, s)
    if k == 3:
        return "%s-%s-%s" % (a, e, s)
    if k == 4:
        return "%s.%s.%s" % (a, e, s)
    if k == 5:
        return "+86 %s %s %s" % (m[:3], m[3:7], m[7:])
    if k == 6:
        return "+86" + m
    if k == 7:
        return "(+86)" + m
    if k == 8:
        return m
    if k == 9:
        return "%s-%s-%s" % (m[:3], m[3:7], m[7:])
    if k == 10:
        return rng.choice(["+44 20 7946 %04d", "+49 30 9018%04d", "+33 1 23 45 %04d",
                           "+81 3-1234-%04d", "+61 2 9876 %04d"]) % rng.randint(0, 9999)
    return "+1%s%s%s" % (a, e, s)


CARD_KINDS = [("4", 16), ("4", 13), ("51", 16), ("55", 16), ("2221", 16), ("2720", 16),
              ("2500", 16), ("34", 15), ("37", 15), ("6011", 16), ("65", 16), ("3530", 16),
              ("62", 16), ("62", 19), ("36", 14), ("4", 19)]


def gen_card(rng):
    pfx, n = rng.choice(CARD_KINDS)
    if pfx in ("2221", "2720", "2500"):
        pfx = str(rng.randint(2221, 2720))
    d = luhn_complete(pfx, n, rng)
    r = rng.random()
    if n == 16 and r < 0.35:
        return group(d, [4, 4, 4, 4], " ")
    if n == 16 and r < 0.6:
        return group(d, [4, 4, 4, 4], "-")
    if n == 15 and r < 0.5:
        return group(d, [4, 6, 5], " ")
    return d


IBAN = {"DE": 22, "GB": 22, "FR": 27, "ES": 24, "IT": 27, "NL": 18, "BE": 16, "CH": 21,
        "AT": 20, "PL": 28, "SE": 24, "NO": 15, "IE": 22, "PT": 25, "DK": 18, "FI": 18}


def iban_check(cc, bban):
    s = bban + cc + "00"
    num = "".join(str(int(c, 36)) for c in s)
    return "%02d" % (98 - int(num) % 97)


def gen_iban(rng):
    cc = rng.choice(sorted(IBAN))
    n = IBAN[cc] - 4
    if cc in ("GB", "NL", "IE"):
        bban = "".join(rng.choice(string.ascii_uppercase) for _ in range(4)) + \
            "".join(rng.choice(string.digits) for _ in range(n - 4))
    else:
        bban = "".join(rng.choice(string.digits) for _ in range(n))
    iban = cc + iban_check(cc, bban) + bban
    if rng.random() < 0.5:
        return " ".join(iban[k:k + 4] for k in range(0, len(iban), 4))
    return iban


def gen_ipv4(rng):
    return ".".join(str(rng.randint(0, 255)) for _ in range(4))


def gen_ipv6(rng):
    k = rng.randrange(5)
    if k == 0:  # a global address, RFC 5952 compressed
        x = (0x2001 << 112) | (0x0db8 << 96) | rng.getrandbits(64)
        return ipaddress.IPv6Address(x).compressed
    if k == 1:  # fully written
        return ipaddress.IPv6Address(rng.getrandbits(128)).exploded
    if k == 2:  # link-local
        return "fe80::%x:%x:%x:%x" % tuple(rng.getrandbits(16) | 0x1000 for _ in range(4))
    if k == 3:  # IPv4-mapped
        return "::ffff:" + gen_ipv4(rng)
    return ipaddress.IPv6Address(rng.getrandbits(128)).compressed


def gen_ssn(rng):
    while True:
        a = rng.randint(1, 899)
        if a != 666:
            break
    return "%03d-%02d-%04d" % (a, rng.randint(1, 99), rng.randint(1, 9999))


PROVINCES = [11, 12, 13, 14, 15, 21, 22, 23, 31, 32, 33, 34, 35, 36, 37, 41, 42, 43, 44, 45, 46,
             50, 51, 52, 53, 54, 61, 62, 63, 64, 65]
CNID_W = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2]


def cnid_check(d17):
    return "10X98765432"[sum(int(c) * w for c, w in zip(d17, CNID_W)) % 11]


def rand_date(rng):
    import datetime
    d0 = datetime.date(1940, 1, 1).toordinal()
    d = datetime.date.fromordinal(rng.randint(d0, datetime.date(2012, 12, 31).toordinal()))
    return d.strftime("%Y%m%d")


def gen_cnid(rng):
    d17 = "%02d%04d" % (rng.choice(PROVINCES), rng.randint(100, 9999)) + rand_date(rng) + \
        "%03d" % rng.randint(0, 999)
    return d17 + cnid_check(d17)


B32 = string.ascii_uppercase + "234567"
ALNUM = string.ascii_letters + string.digits


def rand_s(rng, alphabet, n):
    while True:
        s = "".join(rng.choice(alphabet) for _ in range(n))
        if any(c.isdigit() for c in s) and any(c.isalpha() for c in s):
            return s


def gen_secret(rng):
    """returns (text, (start, end) of the secret within text)"""
    k = rng.randrange(11)
    if k == 0:
        s = "AKIA" + rand_s(rng, B32, 16)
        return s, (0, len(s))
    if k == 1:
        s = rng.choice(["sk-", "sk-proj-", "sk-ant-api03-"]) + rand_s(rng, ALNUM + "_-", 40)
        return s, (0, len(s))
    if k == 2:
        s = rng.choice(["sk_live_", "sk_test_"]) + rand_s(rng, ALNUM, 24)
        return s, (0, len(s))
    if k == 3:
        s = "ghp_" + rand_s(rng, ALNUM, 36)
        return s, (0, len(s))
    if k in (4, 5):
        key = rng.choice(["password", "passwd", "pwd", "token", "api_key", "secret",
                          "DB_PASSWORD", "access_token", "client_secret", "PASSWORD"])
        v = rand_s(rng, ALNUM + "!@*", rng.randint(8, 20))
        fmt = rng.choice(["%s=%s", "%s = %s", "%s: %s", '"%s": "%s"', "%s='%s'", "?%s=%s&lang=en"])
        if fmt == "%s: %s" and key in ("pwd", "token", "secret", "access_token", "client_secret"):
            fmt = "%s=%s"
        t = fmt % (key, v)
        s = t.index(v)
        return t, (s, s + len(v))
    if k == 6:
        u = rng.choice(EN_NAMES).replace("+", "")
        p = rand_s(rng, ALNUM, 12)
        t = "%s://%s:%s@%s/db" % (rng.choice(["https", "postgres", "mysql", "redis", "ftp"]), u,
                                  p, rng.choice(DOMAINS))
        s = t.index("//") + 2
        return t, (s, s + len(u) + 1 + len(p))
    if k == 7:
        tok = rand_s(rng, ALNUM + "-._", 40)
        t = "Authorization: Bearer " + tok
        return t, (len(t) - len(tok), len(t))
    if k == 8:
        s = "xoxb-" + "%d-%d-" % (rng.randint(10**9, 10**10), rng.randint(10**9, 10**10)) + \
            rand_s(rng, ALNUM, 24)
        return s, (0, len(s))
    kind = rng.choice(["RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY"])
    body = base64.b64encode(bytes(rng.getrandbits(8) for _ in range(rng.randint(90, 1200)))).decode()
    lines = "\n".join(body[k:k + 64] for k in range(0, len(body), 64))
    t = "-----BEGIN %s-----\n%s\n-----END %s-----" % (kind, lines, kind)
    return t, (0, len(t))


GEN = {"email": gen_email, "phone": gen_phone, "card": gen_card, "iban": gen_iban,
       "ipv4": gen_ipv4, "ipv6": gen_ipv6, "ssn": gen_ssn, "cnid": gen_cnid}

EN_CTX = {
    "email": ["Write to {} for details.", "Contact: {}", "mail me at <{}>.", "mailto:{}",
              "({})", "{}, thanks"],
    "phone": ["Call {} today.", "Tel: {}", "phone {}, ext 12", "reach me on {}."],
    "card": ["Card number {} expires 12/27.", "paid with {}.", "cc={}", "CARD: {}"],
    "iban": ["Transfer to IBAN {} please.", "IBAN: {}", "account {}."],
    "ipv4": ["Connection from {} refused.", "host {}:8080", "ping {}", "http://{}/admin",
             "{}/24"],
    "ipv6": ["Connection from {} refused.", "listen [{}]:443", "addr {}.", "http://[{}]/"],
    "ssn": ["SSN {} on file.", "social security number: {}", "ssn={}"],
    "cnid": ["ID {}.", "citizen id {}", "id_number: {}"],
}
ZH_CTX = {
    "email": ["我的邮箱是{}，请查收。", "邮箱：{}", "发到{}谢谢"],
    "phone": ["手机{}号", "我的手机号是{}，请联系。", "电话：{}。", "联系电话{}"],
    "card": ["卡号{}谢谢", "银行卡号：{}，", "请转账到{}。"],
    "iban": ["国际账号{}。", "收款账户：{}"],
    "ipv4": ["服务器地址{}，", "来自{}的连接被拒绝。"],
    "ipv6": ["服务器地址{}，", "来自{}的连接。"],
    "ssn": ["美国社保号{}。"],
    "cnid": ["身份证号{}，", "身份证号码：{}。", "证件号{}"],
}
ZH_SECRET_CTX = ["密钥{}。", "配置如下：{}", "{}"]
EN_SECRET_CTX = ["config: {}", "export {}", "{}", "leaked {} in the log"]


# ---- hard negatives --------------------------------------------------------------------------

def neg_items(rng):
    """(kind, text) pairs that must not be reported"""
    def digits(n, first="123456789"):
        return rng.choice(first) + "".join(rng.choice(string.digits) for _ in range(n - 1))
    while True:
        k = rng.randrange(26)
        if k == 0:  # millisecond timestamps, Luhn-valid ones on purpose
            t = str(rng.randint(1500000000000, 1800000000000))
            t = t[:-1] + next(c for c in string.digits if luhn_ok(t[:-1] + c))
            yield "timestamp_ms", t
        elif k == 1:
            yield "timestamp_s", str(rng.randint(1500000000, 1800000000))
        elif k == 2:
            yield "timestamp_us", str(rng.randint(1500000000000000, 1800000000000000))
        elif k == 3:
            n = rng.randint(5, 6)
            yield "version", ".".join(str(rng.randint(0, 20)) for _ in range(n))
        elif k == 4:
            yield "version", rng.choice(["v", "version ", "Version ", "ver. "]) + \
                ".".join(str(rng.randint(0, 30)) for _ in range(4))
        elif k == 5:
            yield "version", "%d.%d.%d" % (rng.randint(0, 9), rng.randint(0, 20), rng.randint(0, 99))
        elif k == 6:  # ISBN-13 and ISBN-10
            b = "978" + digits(9, string.digits)
            c = (10 - sum(int(x) * (1 if i % 2 == 0 else 3) for i, x in enumerate(b)) % 10) % 10
            isbn = b + str(c)
            yield "isbn", rng.choice([isbn, "%s-%s-%s-%s-%s" % (isbn[:3], isbn[3], isbn[4:7],
                                                                  isbn[7:12], isbn[12])])
        elif k == 7:
            b = digits(9, string.digits)
            c = sum((10 - i) * int(x) for i, x in enumerate(b)) % 11
            c = (11 - c) % 11
            yield "isbn", "ISBN " + b + ("X" if c == 10 else str(c))
        elif k == 8:
            yield "order", rng.choice(["ORD-%d-%07d", "PO-%d-%05d", "INV%d%06d"]) % (
                rng.randint(2019, 2025), rng.randint(0, 9999999 if rng.random() < .5 else 99999))
        elif k == 9:
            yield "order", "订单号" + "2024%02d%02d" % (rng.randint(1, 12), rng.randint(1, 28)) + \
                digits(10, string.digits)
        elif k == 10:
            yield "git", "".join(rng.choice("0123456789abcdef") for _ in range(rng.choice([7, 12, 40])))
        elif k == 11:
            yield "date", rng.choice(["%04d-%02d-%02d", "%04d/%02d/%02d"]) % (
                rng.randint(1990, 2030), rng.randint(1, 12), rng.randint(1, 28))
        elif k == 12:
            yield "date", "%02d/%02d/%04d %02d:%02d:%02d" % (rng.randint(1, 12), rng.randint(1, 28),
                                                            rng.randint(1990, 2030), rng.randint(0, 23),
                                                            rng.randint(0, 59), rng.randint(0, 59))
        elif k == 13:
            yield "date", "%d年%d月%d日" % (rng.randint(1990, 2030), rng.randint(1, 12),
                                           rng.randint(1, 28))
        elif k == 14:
            yield "price", rng.choice(["$%d,%03d.%02d" % (rng.randint(1, 999), rng.randint(0, 999),
                                                          rng.randint(0, 99)),
                                       "¥%d,%03d" % (rng.randint(1, 999), rng.randint(0, 999)),
                                       "€%d.%02d" % (rng.randint(0, 999), rng.randint(0, 99)),
                                       "USD 1,000,000.00", "+3.5%", "-12.75%", "£249.00"])
        elif k == 15:  # IPv6-looking hex
            yield "hexlike", rng.choice([
                ":".join("%02X" % rng.getrandbits(8) for _ in range(6)),      # MAC
                ":".join("%02x" % rng.getrandbits(8) for _ in range(6)),
                "%02d:%02d:%02d" % (rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59)),
                "dead:beef:cafe", "::", "std::vector<int>", "a::b", "Foo::Bar::baz()",
                "fe80::/10", "12:34:56:78", "0x%08x" % rng.getrandbits(32),
                "sha256:" + "".join(rng.choice("0123456789abcdef") for _ in range(64)),
                "1:2:3:4:5:6:7"])
        elif k == 16:  # card-shaped, Luhn-invalid
            pfx, n = rng.choice(CARD_KINDS)
            d = luhn_complete(pfx, n, rng)
            d = d[:-1] + str((int(d[-1]) + rng.randint(1, 9)) % 10)
            yield "card_bad_luhn", d
        elif k == 17:  # Luhn-valid, but no network issues this prefix/length
            pfx = rng.choice(["1", "7", "9", "0"])  # (8: UnionPay and RuPay issue 81, 82)
            yield "card_bad_iin", luhn_complete(pfx, rng.choice([13, 16]), rng)
        elif k == 18:  # IBAN with a wrong check
            s = gen_iban(rng).replace(" ", "")
            bad = s[:2] + "%02d" % ((int(s[2:4]) + rng.randint(1, 50)) % 97 + 2) + s[4:]
            if bad[2:4] != s[2:4]:
                yield "iban_bad", bad
        elif k == 19:  # PRC ID with a wrong check digit or an impossible birth date
            d = gen_cnid(rng)
            if rng.random() < 0.5:
                yield "cnid_bad", d[:17] + rng.choice([c for c in "0123456789X" if c != d[17]])
            else:
                d17 = d[:6] + "%04d0230" % rng.randint(1950, 2000) + d[14:17]
                yield "cnid_bad", d17 + cnid_check(d17)
        elif k == 20:
            yield "ssn_bad", rng.choice(["000", "666", "9%02d" % rng.randint(0, 99)]) + \
                "-%02d-%04d" % (rng.randint(1, 99), rng.randint(1, 9999))
        elif k == 21:
            yield "ipv4_bad", ".".join(str(rng.randint(0, 255)) for _ in range(3)) + \
                "." + str(rng.randint(256, 999))
        elif k == 22:
            yield "phone_bad", rng.choice(["555-%04d" % rng.randint(0, 9999),
                                           "123-456-%04d" % rng.randint(0, 9999),
                                           "+%d" % rng.randint(10, 999999),
                                           "%d" % rng.randint(10**9, 10**10 - 1)])
        elif k == 23:
            yield "secret_like", rng.choice(["sk-learn", "password: it", "token count",
                                             "the pass: through the gate", "max_tokens=256",
                                             "password=${DB_PASSWORD}", "token=<SECRET>",
                                             "api_key=None", "AKIA", "-----BEGIN CERTIFICATE-----",
                                             "password = getpass()", "pwd=/home/alice"])
        elif k == 24:
            yield "email_like", rng.choice(["@handle", "user@localhost", "a@b", "x@y.c",
                                            "foo@@bar.com", "name at example dot com"])
        else:
            yield "number", rng.choice(["%d" % rng.randint(0, 10**6), "No. %d" % rng.randint(1, 999),
                                        "%d.%d%%" % (rng.randint(0, 99), rng.randint(0, 9)),
                                        "第%d章" % rng.randint(1, 99)])


NEG_EN = ["Seen {} here.", "({})", "value {}, ok", "{}"]
NEG_ZH = ["编号{}，", "见{}。", "{}"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--per-type", type=int, default=400)
    ap.add_argument("--negatives", type=int, default=4000)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    with open(SHAKESPEARE, encoding="utf-8") as f:
        sk = [ln for ln in f.read().split("\n") if ln.strip()]

    items = []  # (kind, is_pii, type_or_kind, text, (s, e) or None, zh)
    for t, g in GEN.items():
        for _ in range(a.per_type):
            v = g(rng)
            items.append(("pii", t, v, (0, len(v)), rng.random() < 0.4))
    for _ in range(a.per_type):
        v, se = gen_secret(rng)
        items.append(("pii", "secret", v, se, rng.random() < 0.4))
    negs = neg_items(rng)
    for _ in range(a.negatives):
        kind, v = next(negs)
        items.append(("neg", kind, v, None, rng.random() < 0.4))
    rng.shuffle(items)

    os.makedirs(a.out, exist_ok=True)
    out = bytearray()
    labels, negatives = [], []
    for what, t, v, se, zh in items:
        # filler before each item: a Shakespeare line or a Chinese sentence
        for _ in range(rng.randint(0, 2)):
            out += ((rng.choice(ZH_FILLER) if zh else rng.choice(sk)) + "\n").encode()
        if what == "pii":
            if t == "secret":
                ctx = rng.choice(ZH_SECRET_CTX if zh else EN_SECRET_CTX)
            else:
                ctx = rng.choice((ZH_CTX if zh else EN_CTX)[t])
        else:
            ctx = rng.choice(NEG_ZH if zh else NEG_EN)
        pre, post = ctx.split("{}")
        base = len(out) + len(pre.encode())
        out += (pre + v + post).encode()
        vs = v.encode()
        if what == "pii":
            s = base + len(v[:se[0]].encode())
            e = base + len(v[:se[1]].encode())
            labels.append((s, e, t))
        else:
            negatives.append((base, base + len(vs), t))
        out += b"\n" if rng.random() < 0.7 else b" "
    with open(os.path.join(a.out, "corpus.txt"), "wb") as f:
        f.write(out)
    with open(os.path.join(a.out, "labels.tsv"), "w") as f:
        for s, e, t in labels:
            f.write("%d\t%d\t%s\n" % (s, e, t))
    with open(os.path.join(a.out, "negatives.tsv"), "w") as f:
        for s, e, t in negatives:
            f.write("%d\t%d\t%s\n" % (s, e, t))
    print("pii_corpus: %d bytes, %d PII spans, %d hard negatives -> %s" %
          (len(out), len(labels), len(negatives), a.out))


if __name__ == "__main__":
    main()
