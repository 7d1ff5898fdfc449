/* sq_lex.c - the SQL tokenizer, statement classification and the H2->SQLite
 * pre-pass (reference sql.md §3.2): strings, quoted identifiers, comments
 * and parameters are recognised so rewriting never touches their insides.
 */
#include "sql/sql_int.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "util/err.h"
#include "util/mem.h"

static int is_word_start(unsigned char c) { return isalpha(c) || c == '_' || c >= 0x80; }
static int is_word_char(unsigned char c) { return isalnum(c) || c == '_' || c == '$' || c >= 0x80; }

static int lex_fail(char *msg, size_t msgsz, const char *what, size_t pos)
{
    snprintf(msg, msgsz, "Failed to parse query. %s at position %zu", what, pos);
    return EM_INVAL;
}

int sq_lex(const char *src, size_t n, sq_lexed *out, char *msg, size_t msgsz)
{
    memset(out, 0, sizeof *out);
    if (n > SQ_MAX_SQL)
        return lex_fail(msg, msgsz, "SQL text too long", SQ_MAX_SQL);
    /* At most one token per byte, plus the end marker. */
    uint32_t cap = 16, nt = 0;
    sq_tok *t = em_malloc(cap * sizeof *t);
    if (!t)
        return EM_NOMEM;
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)src[i];
        if (isspace(c)) { i++; continue; }
        if (c == '-' && i + 1 < n && src[i + 1] == '-') {
            while (i < n && src[i] != '\n') i++;
            continue;
        }
        if (c == '/' && i + 1 < n && src[i + 1] == '*') {
            size_t j = i + 2;
            while (j + 1 < n && !(src[j] == '*' && src[j + 1] == '/')) j++;
            if (j + 1 >= n) {
                em_free(t);
                return lex_fail(msg, msgsz, "Unterminated comment", i);
            }
            i = j + 2;
            continue;
        }
        if (nt + 2 > cap) {
            uint32_t nc = cap * 2;
            sq_tok *nt2 = em_realloc(t, nc * sizeof *t);
            if (!nt2) {
                em_free(t);
                return EM_NOMEM;
            }
            t = nt2;
            cap = nc;
        }
        sq_tok k = { SQ_TK_PUNCT, (uint32_t)i, 1 };
        if (c == '\'' || c == '"' || c == '`') {
            /* A doubled quote is an escaped quote inside. */
            size_t j = i + 1;
            for (;;) {
                if (j >= n) {
                    em_free(t);
                    return lex_fail(msg, msgsz, c == '\'' ? "Unterminated string" : "Unterminated identifier", i);
                }
                if ((unsigned char)src[j] == c) {
                    if (j + 1 < n && (unsigned char)src[j + 1] == c) { j += 2; continue; }
                    break;
                }
                j++;
            }
            k.kind = c == '\'' ? SQ_TK_STRING : SQ_TK_QUOTED;
            k.len = (uint32_t)(j + 1 - i);
        } else if (is_word_start(c)) {
            size_t j = i;
            while (j < n && is_word_char((unsigned char)src[j])) j++;
            k.kind = SQ_TK_WORD;
            k.len = (uint32_t)(j - i);
        } else if (isdigit(c) || (c == '.' && i + 1 < n && isdigit((unsigned char)src[i + 1]))) {
            size_t j = i;
            while (j < n && (isalnum((unsigned char)src[j]) || src[j] == '.' ||
                             ((src[j] == '+' || src[j] == '-') && (src[j - 1] == 'e' || src[j - 1] == 'E'))))
                j++;
            k.kind = SQ_TK_NUMBER;
            k.len = (uint32_t)(j - i);
        } else if (c == '?') {
            size_t j = i + 1;
            while (j < n && isdigit((unsigned char)src[j])) j++;
            k.kind = SQ_TK_PARAM;
            k.len = (uint32_t)(j - i);
        } else if (strchr("(),;.*+-/%=<>!|&~[]{}:^@", c)) {
            /* Two-character operators stay one token so rewriting keeps them. */
            static const char *two[] = {"<=", ">=", "<>", "!=", "||", "==", "<<", ">>", "::"};
            for (size_t m = 0; m < sizeof two / sizeof two[0]; m++)
                if (i + 1 < n && src[i] == two[m][0] && src[i + 1] == two[m][1])
                    k.len = 2;
        } else {
            em_free(t);
            return lex_fail(msg, msgsz, "Unexpected character", i);
        }
        t[nt++] = k;
        i += k.len;
    }
    t[nt] = (sq_tok){ SQ_TK_END, (uint32_t)n, 0 };
    out->src = src;
    out->n = n;
    out->t = t;
    out->ntok = nt;
    return 0;
}

void sq_lexed_free(sq_lexed *l)
{
    em_free(l->t);
    l->t = NULL;
}

int sq_word_is(const sq_lexed *l, uint32_t i, const char *w)
{
    if (i >= l->ntok || l->t[i].kind != SQ_TK_WORD)
        return 0;
    size_t wl = strlen(w);
    return l->t[i].len == wl && strncasecmp(l->src + l->t[i].off, w, wl) == 0;
}

int sq_classify(const sq_lexed *l)
{
    uint32_t i = 0;
    while (i < l->ntok && l->t[i].kind == SQ_TK_PUNCT && l->src[l->t[i].off] == '(')
        i++;                        /* "(SELECT ...) UNION ..." */
    if (sq_word_is(l, i, "SELECT") || sq_word_is(l, i, "WITH") || sq_word_is(l, i, "VALUES"))
        return SQ_CLS_QUERY;
    if (sq_word_is(l, i, "INSERT") || sq_word_is(l, i, "UPDATE") ||
        sq_word_is(l, i, "DELETE") || sq_word_is(l, i, "MERGE"))
        return SQ_CLS_DML;
    if (sq_word_is(l, i, "CREATE") || sq_word_is(l, i, "DROP") || sq_word_is(l, i, "ALTER"))
        return SQ_CLS_DDL;
    return 0;
}

int sq_ident(const sq_lexed *l, uint32_t i, char *out, size_t outsz)
{
    if (i >= l->ntok)
        return EM_INVAL;
    const sq_tok *k = &l->t[i];
    const char *s = l->src + k->off;
    size_t o = 0;
    if (k->kind == SQ_TK_WORD) {
        if (k->len >= outsz)
            return EM_INVAL;
        for (uint32_t j = 0; j < k->len; j++)
            out[o++] = (char)toupper((unsigned char)s[j]);
    } else if (k->kind == SQ_TK_QUOTED) {
        char q = s[0];
        for (uint32_t j = 1; j + 1 < k->len; j++) {
            if (s[j] == q)
                j++;                /* doubled quote */
            if (o + 1 >= outsz)
                return EM_INVAL;
            out[o++] = s[j];
        }
        if (!o)
            return EM_INVAL;
    } else {
        return EM_INVAL;
    }
    out[o] = 0;
    return 0;
}

static int put(em_buf *b, const char *s, size_t n)
{
    return em_buf_append(b, s, n);
}

/* emit copies tokens [from, to) in SQLite form, with the text between them
 * (SQLite names result columns after the expression as written, so
 * "COUNT(*)" must keep its spelling).  *prev: end of the last copied token;
 * tokens skip and skip + 1 are dropped (TOP n). */
static int emit(const sq_lexed *l, uint32_t from, uint32_t to, size_t *prev, uint32_t skip,
                em_buf *out)
{
    int rc = 0;
    for (uint32_t i = from; !rc && i < to; i++) {
        const sq_tok *k = &l->t[i];
        const char *s = l->src + k->off;
        if (skip != UINT32_MAX && (i == skip || i == skip + 1)) {
            *prev = k->off + k->len;
            continue;
        }
        if ((rc = put(out, l->src + *prev, k->off - *prev)) != 0)
            break;
        *prev = k->off + k->len;
        switch (k->kind) {
        case SQ_TK_WORD:
            if (sq_word_is(l, i, "MINUS")) {
                rc = put(out, "EXCEPT", 6);
                break;
            }
            if ((rc = em_buf_reserve(out, k->len)) != 0)
                break;
            for (uint32_t j = 0; j < k->len; j++)
                out->p[out->len++] = (uint8_t)toupper((unsigned char)s[j]);
            break;
        case SQ_TK_PUNCT:
            /* "a, b,)" is accepted by H2; drop the comma. */
            if (s[0] == ',' && i + 1 < l->ntok && l->t[i + 1].kind == SQ_TK_PUNCT &&
                l->src[l->t[i + 1].off] == ')')
                break;
            rc = put(out, s, k->len);
            break;
        default:
            rc = put(out, s, k->len);
            break;
        }
    }
    return rc;
}

int sq_punct_is(const sq_lexed *l, uint32_t i, char c)
{
    return i < l->ntok && l->t[i].kind == SQ_TK_PUNCT && l->t[i].len == 1 && l->src[l->t[i].off] == c;
}

/* insert_set rewrites H2's INSERT INTO t SET a = x, b = y (SET at token
 * set) as INSERT INTO t (a, b) VALUES (x, y); parameters keep their order. */
static int insert_set(const sq_lexed *l, uint32_t set, uint32_t end, em_buf *out, char *msg,
                      size_t msgsz)
{
    size_t prev = 0;
    int rc = emit(l, 0, set, &prev, UINT32_MAX, out);
    uint32_t cols[256], ex[256], ee[256], n = 0;
    for (uint32_t i = set + 1; !rc && i < end;) {
        if (n == 256 || !sq_punct_is(l, i + 1, '=') || (l->t[i].kind != SQ_TK_WORD &&
                                                     l->t[i].kind != SQ_TK_QUOTED)) {
            snprintf(msg, msgsz, "Failed to parse query. INSERT ... SET expects column = value, ...");
            return EM_INVAL;
        }
        cols[n] = i;
        ex[n] = i + 2;
        int depth = 0;
        uint32_t j = i + 2;
        for (; j < end; j++) {
            if (sq_punct_is(l, j, '(')) depth++;
            else if (sq_punct_is(l, j, ')')) depth--;
            else if (!depth && sq_punct_is(l, j, ','))
                break;
        }
        if (j == ex[n]) {
            snprintf(msg, msgsz, "Failed to parse query. INSERT ... SET: a value is missing");
            return EM_INVAL;
        }
        ee[n++] = j;
        i = j + 1;
    }
    rc = rc || put(out, " (", 2);
    for (uint32_t c = 0; !rc && c < n; c++) {
        prev = l->t[cols[c]].off;
        rc = (c && put(out, ", ", 2)) || emit(l, cols[c], cols[c] + 1, &prev, UINT32_MAX, out);
    }
    rc = rc || put(out, ") VALUES (", 10);
    for (uint32_t c = 0; !rc && c < n; c++) {
        prev = l->t[ex[c]].off;
        rc = (c && put(out, ", ", 2)) || emit(l, ex[c], ee[c], &prev, UINT32_MAX, out);
    }
    rc = rc || put(out, ")", 1) || em_buf_put_u8(out, 0);
    return rc ? EM_NOMEM : 0;
}

int sq_rewrite(const sq_lexed *l, em_buf *out, char *msg, size_t msgsz)
{
    uint32_t i = 0;
    size_t prev = 0;                /* end of the last token copied */
    int rc = 0;
    uint32_t end = l->ntok;
    if (end && sq_punct_is(l, end - 1, ';'))
        end--;
    if (sq_word_is(l, 0, "INSERT") && sq_word_is(l, 1, "INTO")) {
        uint32_t set = sq_punct_is(l, 3, '.') ? 5 : 3;
        if (sq_word_is(l, set, "SET"))
            return insert_set(l, set, end, out, msg, msgsz);
    }
    if (sq_word_is(l, 0, "MERGE") && sq_word_is(l, 1, "INTO")) {
        /* H2's MERGE INTO t (cols) VALUES is a put: SQLite's INSERT OR
         * REPLACE reaches xUpdate with the REPLACE conflict mode. */
        for (uint32_t j = 2; j < l->ntok; j++)
            if (sq_word_is(l, j, "KEY")) {
                snprintf(msg, msgsz, "MERGE ... KEY(...) is not supported by ember yet");
                return EM_UNSUPPORTED;
            }
        rc = put(out, "INSERT OR REPLACE INTO", 22);
        i = 2;
        prev = l->t[1].off + l->t[1].len;
    }
    /* H2's SELECT [DISTINCT] TOP n: dropped here, LIMIT n appended. */
    uint32_t top = UINT32_MAX;
    if (sq_word_is(l, 0, "SELECT")) {
        uint32_t j = sq_word_is(l, 1, "DISTINCT") ? 2 : 1;
        if (sq_word_is(l, j, "TOP") && j + 1 < l->ntok && l->t[j + 1].kind == SQ_TK_NUMBER)
            top = j;
    }
    if (!rc)
        rc = emit(l, i, end, &prev, top, out);
    if (!rc && top != UINT32_MAX)
        rc = put(out, " LIMIT ", 7) ||
             put(out, l->src + l->t[top + 1].off, l->t[top + 1].len) ? EM_NOMEM : 0;
    if (!rc)
        rc = em_buf_put_u8(out, 0);
    return rc;
}
