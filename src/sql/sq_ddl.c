/* sq_ddl.c - ember's DDL parser (reference sql.md §1.3 "CREATE TABLE",
 * §3.2 (b)): CREATE TABLE [IF NOT EXISTS] with column or table PRIMARY KEY
 * and WITH "k=v,...", DROP TABLE [IF EXISTS] (before or after the name),
 * CREATE/DROP INDEX (built by sq_index.c; ASC/DESC and INLINE_SIZE are
 * accepted, the index is ascending).  DDL never reaches
 * SQLite as user text; the catalog (sq_cat.c) acts on the parsed form.
 */
#include "sql/sql_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/mem.h"

typedef struct pst {
    const sq_lexed *l;
    uint32_t i;
    char *msg;
    size_t msgsz;
} pst;

static int perr(pst *p, const char *fmt, const char *arg)
{
    snprintf(p->msg, p->msgsz, fmt, arg);
    return EM_INVAL;
}

static int syntax(pst *p)
{
    const sq_tok *k = &p->l->t[p->i];
    char near[48];
    size_t n = k->kind == SQ_TK_END ? 0 : (k->len < 40 ? k->len : 40);
    memcpy(near, p->l->src + k->off, n);
    near[n] = 0;
    snprintf(p->msg, p->msgsz, "Failed to parse query. Syntax error in SQL statement near \"%s\"%s",
             near, n ? "" : " (end of statement)");
    return EM_INVAL;
}

static int word(pst *p, const char *w)
{
    if (sq_word_is(p->l, p->i, w)) {
        p->i++;
        return 1;
    }
    return 0;
}

static int punct(pst *p, char c)
{
    const sq_tok *k = &p->l->t[p->i];
    if (k->kind == SQ_TK_PUNCT && k->len == 1 && p->l->src[k->off] == c) {
        p->i++;
        return 1;
    }
    return 0;
}

static int ident(pst *p, char *out)
{
    if (sq_ident(p->l, p->i, out, SQ_MAX_NAME))
        return syntax(p);
    p->i++;
    return 0;
}

/* qname: [schema.]name */
static int qname(pst *p, char *schema, char *name)
{
    int rc = ident(p, name);
    if (rc)
        return rc;
    if (punct(p, '.')) {
        memcpy(schema, name, SQ_MAX_NAME);
        return ident(p, name);
    }
    schema[0] = 0;
    return 0;
}

static int if_exists(pst *p)
{
    if (sq_word_is(p->l, p->i, "IF") && sq_word_is(p->l, p->i + 1, "EXISTS")) {
        p->i += 2;
        return 1;
    }
    return 0;
}

/* skip_args skips "(n[, m])" after a type name (widths are not enforced). */
static int skip_args(pst *p)
{
    if (!punct(p, '('))
        return 0;
    for (int n = 0; n < 3; n++) {
        if (p->l->t[p->i].kind != SQ_TK_NUMBER && !sq_word_is(p->l, p->i, "MAX"))
            return syntax(p);
        p->i++;
        if (punct(p, ')'))
            return 0;
        if (!punct(p, ','))
            return syntax(p);
    }
    return syntax(p);
}

static int find_col(const sq_ddl *d, const char *name)
{
    for (uint32_t i = 0; i < d->ncols; i++)
        if (!strcmp(d->cols[i].name, name))
            return (int)i;
    return -1;
}

/* default_literal: a constant DEFAULT (Ignite rejects anything else),
 * kept as SQL text for the virtual table's declaration, so it must be a
 * well-formed literal: a number strtod takes whole, a string, NULL, TRUE,
 * FALSE. */
static int default_literal(pst *p, char *out)
{
    int neg = punct(p, '-');
    const sq_tok *k = &p->l->t[p->i];
    const char *s = p->l->src + k->off;
    int ok = k->kind == SQ_TK_STRING || (!neg && (sq_word_is(p->l, p->i, "NULL") ||
             sq_word_is(p->l, p->i, "TRUE") || sq_word_is(p->l, p->i, "FALSE")));
    if (k->kind == SQ_TK_NUMBER && k->len < SQ_MAX_DEFAULT) {
        char num[SQ_MAX_DEFAULT], *end;
        memcpy(num, s, k->len);
        num[k->len] = 0;
        strtod(num, &end);
        ok = !*end;
    }
    if (!ok)
        return perr(p, "%s", "Non-constant DEFAULT expressions are not supported");
    if (k->len + 2 > SQ_MAX_DEFAULT)
        return perr(p, "DEFAULT value too long (limit %s bytes)", "60");
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    memcpy(out + o, s, k->len);
    out[o + k->len] = 0;
    p->i++;
    return 0;
}

static int column(pst *p, sq_ddl *d)
{
    if (d->ncols >= SQ_MAX_COLS)
        return perr(p, "Too many columns (limit %s)", "256");
    sq_coldef *c = &d->cols[d->ncols];
    memset(c, 0, sizeof *c);
    int rc = ident(p, c->name);
    if (rc)
        return rc;
    if (!strcmp(c->name, "_KEY") || !strcmp(c->name, "_VAL"))
        return perr(p, "Direct specification of _KEY and _VAL columns is forbidden: %s", c->name);
    if (find_col(d, c->name) >= 0)
        return perr(p, "Duplicate column name: %s", c->name);
    char tn[SQ_MAX_NAME];
    if ((rc = ident(p, tn)) != 0)
        return rc;
    if (!strcmp(tn, "DOUBLE"))
        word(p, "PRECISION");
    if (!strcmp(tn, "CHARACTER") || !strcmp(tn, "CHAR"))
        word(p, "VARYING");
    c->type = sq_type_parse(tn);
    if (!c->type)
        return perr(p, "Unknown data type: \"%s\"", tn);
    if ((rc = skip_args(p)) != 0)
        return rc;
    for (;;) {
        if (word(p, "NOT")) {
            if (!word(p, "NULL"))
                return syntax(p);
            c->notnull = 1;
        } else if (word(p, "NULL")) {
        } else if (word(p, "PRIMARY")) {
            if (!word(p, "KEY"))
                return syntax(p);
            for (uint32_t j = 0; j < d->ncols; j++)
                if (d->cols[j].pk)
                    return perr(p, "%s", "Table can have only one primary key");
            c->pk = 1;
        } else if (word(p, "DEFAULT")) {
            if ((rc = default_literal(p, c->dflt)) != 0)
                return rc;
        } else if (sq_word_is(p->l, p->i, "AUTO_INCREMENT") || sq_word_is(p->l, p->i, "IDENTITY") ||
                   sq_word_is(p->l, p->i, "AS") || sq_word_is(p->l, p->i, "CHECK")) {
            return perr(p, "%s", "AUTO_INCREMENT, IDENTITY, computed columns and CHECK "
                        "constraints are not supported by CREATE TABLE");
        } else {
            break;
        }
    }
    d->ncols++;
    return 0;
}

static int table_pk(pst *p, sq_ddl *d)
{
    for (uint32_t j = 0; j < d->ncols; j++)
        if (d->cols[j].pk)
            return perr(p, "%s", "Table can have only one primary key");
    if (!punct(p, '('))
        return syntax(p);
    do {
        char n[SQ_MAX_NAME];
        int rc = ident(p, n);
        if (rc)
            return rc;
        /* PRIMARY KEY (a, b) may precede the columns' definitions. */
        int ci = find_col(d, n);
        if (ci < 0)
            return perr(p, "PRIMARY KEY column is not defined: %s", n);
        d->cols[ci].pk = 1;
    } while (punct(p, ','));
    return punct(p, ')') ? 0 : syntax(p);
}

static void trim(char **s, char **e)
{
    while (*s < *e && isspace((unsigned char)**s)) (*s)++;
    while (*e > *s && isspace((unsigned char)(*e)[-1])) (*e)--;
}

static int set_name(pst *p, char *dst, const char *v, size_t n, const char *key)
{
    if (!n || n >= SQ_MAX_NAME)
        return perr(p, "Parameter value must not be empty or too long: %s", key);
    memcpy(dst, v, n);
    dst[n] = 0;
    return 0;
}

/* with_params parses "k=v,k=v" (names case-insensitive). */
static int with_params(pst *p, sq_ddl *d)
{
    char buf[1024];
    const sq_tok *k = &p->l->t[p->i];
    if ((k->kind != SQ_TK_QUOTED && k->kind != SQ_TK_STRING) || k->len - 2 >= sizeof buf)
        return syntax(p);
    memcpy(buf, p->l->src + k->off + 1, k->len - 2);
    buf[k->len - 2] = 0;
    p->i++;
    char *s = buf;
    while (*s) {
        char *e = strchr(s, ',');
        if (!e) e = s + strlen(s);
        char *eq = memchr(s, '=', (size_t)(e - s));
        char *ks = s, *ke = eq ? eq : e, *vs = eq ? eq + 1 : e, *ve = e;
        trim(&ks, &ke);
        trim(&vs, &ve);
        char key[32];
        size_t kl = (size_t)(ke - ks), vl = (size_t)(ve - vs);
        if (!eq || !kl || kl >= sizeof key)
            return perr(p, "Invalid parameter (key[=value] expected): %s", ks);
        for (size_t i = 0; i < kl; i++) key[i] = (char)toupper((unsigned char)ks[i]);
        key[kl] = 0;
        int rc = 0;
        char v[SQ_MAX_NAME];
        if (vl >= sizeof v)
            return perr(p, "Parameter value too long: %s", key);
        memcpy(v, vs, vl);
        v[vl] = 0;
        if (!strcmp(key, "TEMPLATE")) {
            if (!strcasecmp(v, "REPLICATED")) d->template_replicated = 1;
            else if (!strcasecmp(v, "PARTITIONED")) d->template_replicated = 0;
            else return perr(p, "Cache template not found: %s", v);
        } else if (!strcmp(key, "BACKUPS")) {
            char *end;
            long b = strtol(v, &end, 10);
            if (!vl || *end || b < 0 || b > 1000)
                return perr(p, "Parameter must be a non-negative integer: BACKUPS=%s", v);
            d->backups = (int)b;
        } else if (!strcmp(key, "ATOMICITY")) {
            if (!strcasecmp(v, "ATOMIC")) d->atomic_tx = 0;
            else if (!strcasecmp(v, "TRANSACTIONAL") || !strcasecmp(v, "TRANSACTIONAL_SNAPSHOT"))
                d->atomic_tx = 1;
            else return perr(p, "Invalid value of \"ATOMICITY\" parameter: %s", v);
        } else if (!strcmp(key, "WRAP_KEY") || !strcmp(key, "WRAP_VALUE")) {
            int b = !strcasecmp(v, "true") ? 1 : !strcasecmp(v, "false") ? 0 : -1;
            if (b < 0)
                return perr(p, "Parameter must be true or false: %s", key);
            if (key[5] == 'K') d->wrap_key = b; else d->wrap_value = b;
        } else if (!strcmp(key, "CACHE_NAME")) {
            rc = set_name(p, d->cache_name, v, vl, key);
        } else if (!strcmp(key, "KEY_TYPE")) {
            rc = set_name(p, d->key_type, v, vl, key);
        } else if (!strcmp(key, "VALUE_TYPE")) {
            rc = set_name(p, d->value_type, v, vl, key);
        } else if (!strcmp(key, "AFFINITY_KEY") || !strcmp(key, "AFFINITYKEY")) {
            rc = set_name(p, d->affinity_key, v, vl, key);
            for (char *c = d->affinity_key; *c; c++) *c = (char)toupper((unsigned char)*c);
        } else if (!strcmp(key, "DATA_REGION")) {
            rc = set_name(p, d->data_region, v, vl, key);
        } else if (!strcmp(key, "CACHE_GROUP") || !strcmp(key, "CACHEGROUP")) {
            rc = set_name(p, d->cache_group, v, vl, key);
        } else if (!strcmp(key, "WRITE_SYNCHRONIZATION_MODE") || !strcmp(key, "PARALLELISM") ||
                   !strcmp(key, "ENCRYPTED")) {
            /* accepted: they change nothing on one node */
        } else {
            return perr(p, "Unsupported parameter: %s", key);
        }
        if (rc)
            return rc;
        s = *e ? e + 1 : e;
    }
    return 0;
}

static int create_table(pst *p, sq_ddl *d)
{
    d->kind = SQ_DDL_CREATE_TABLE;
    d->wrap_value = 1;
    if (sq_word_is(p->l, p->i, "IF")) {
        if (!sq_word_is(p->l, p->i + 1, "NOT") || !sq_word_is(p->l, p->i + 2, "EXISTS"))
            return syntax(p);
        p->i += 3;
        d->if_not_exists = 1;
    }
    int rc = qname(p, d->schema, d->table);
    if (rc)
        return rc;
    if (sq_word_is(p->l, p->i, "AS"))
        return perr(p, "%s", "CREATE TABLE ... AS SELECT is not supported");
    if (!punct(p, '('))
        return syntax(p);
    d->cols = em_calloc(SQ_MAX_COLS, sizeof *d->cols);
    if (!d->cols)
        return EM_NOMEM;
    do {
        if (p->l->t[p->i].kind == SQ_TK_PUNCT && p->l->src[p->l->t[p->i].off] == ')')
            break;                  /* trailing comma */
        if (word(p, "CONSTRAINT") && (rc = ident(p, (char[SQ_MAX_NAME]){0})) != 0)
            return rc;
        if (sq_word_is(p->l, p->i, "PRIMARY") && sq_word_is(p->l, p->i + 1, "KEY")) {
            p->i += 2;
            rc = table_pk(p, d);
        } else {
            rc = column(p, d);
        }
        if (rc)
            return rc;
    } while (punct(p, ','));
    if (!punct(p, ')'))
        return syntax(p);
    if (word(p, "WITH") && (rc = with_params(p, d)) != 0)
        return rc;
    uint32_t npk = 0;
    for (uint32_t i = 0; i < d->ncols; i++)
        npk += d->cols[i].pk;
    if (!npk)
        return perr(p, "%s", "No PRIMARY KEY defined for CREATE TABLE");
    if (npk == d->ncols)
        return perr(p, "%s", "Table must have at least one non PRIMARY KEY column.");
    if (d->affinity_key[0] && (find_col(d, d->affinity_key) < 0 ||
                               !d->cols[find_col(d, d->affinity_key)].pk))
        return perr(p, "Affinity key column must be one of key columns: %s", d->affinity_key);
    return 0;
}

static int create_index(pst *p, sq_ddl *d)
{
    d->kind = SQ_DDL_CREATE_INDEX;
    if (sq_word_is(p->l, p->i, "IF")) {
        if (!sq_word_is(p->l, p->i + 1, "NOT") || !sq_word_is(p->l, p->i + 2, "EXISTS"))
            return syntax(p);
        p->i += 3;
        d->if_not_exists = 1;
    }
    int rc = ident(p, d->index);
    if (rc)
        return rc;
    if (!word(p, "ON"))
        return syntax(p);
    if ((rc = qname(p, d->schema, d->table)) != 0)
        return rc;
    if (!punct(p, '('))
        return syntax(p);
    if (!(d->cols = em_calloc(SQ_MAX_COLS, sizeof *d->cols)))
        return EM_NOMEM;
    do {
        if (d->ncols >= SQ_MAX_COLS)
            return perr(p, "Too many columns (limit %s)", "256");
        if ((rc = ident(p, d->cols[d->ncols++].name)) != 0)
            return rc;
        if (!word(p, "ASC"))
            word(p, "DESC");
    } while (punct(p, ','));
    if (!punct(p, ')'))
        return syntax(p);
    while (word(p, "INLINE_SIZE") || word(p, "PARALLEL"))
        if (p->l->t[p->i].kind == SQ_TK_NUMBER) p->i++; else return syntax(p);
    return 0;
}

/* ALTER TABLE [IF EXISTS] t ADD [COLUMN] [IF NOT EXISTS] (c type, ...) | c type
 * or DROP [COLUMN] [IF EXISTS] c[, c ...] */
static int alter_table(pst *p, sq_ddl *d)
{
    d->if_exists = if_exists(p);
    int rc = qname(p, d->schema, d->table);
    if (rc)
        return rc;
    d->cols = em_calloc(SQ_MAX_COLS, sizeof *d->cols);
    if (!d->cols)
        return EM_NOMEM;
    if (word(p, "ADD")) {
        d->kind = SQ_DDL_ADD_COLUMN;
        word(p, "COLUMN");
        if (sq_word_is(p->l, p->i, "IF") && sq_word_is(p->l, p->i + 1, "NOT") &&
            sq_word_is(p->l, p->i + 2, "EXISTS")) {
            p->i += 3;
            d->col_if = 1;
        }
        int paren = punct(p, '(');
        do {
            if ((rc = column(p, d)) != 0)
                return rc;
            if (d->cols[d->ncols - 1].pk)
                return perr(p, "%s", "ALTER TABLE ADD COLUMN cannot add a PRIMARY KEY column");
        } while (paren && punct(p, ','));
        return paren && !punct(p, ')') ? syntax(p) : 0;
    }
    if (word(p, "DROP")) {
        d->kind = SQ_DDL_DROP_COLUMN;
        word(p, "COLUMN");
        d->col_if = if_exists(p);
        do {
            if (d->ncols >= SQ_MAX_COLS)
                return perr(p, "Too many columns (limit %s)", "256");
            if ((rc = ident(p, d->cols[d->ncols].name)) != 0)
                return rc;
            d->ncols++;
        } while (punct(p, ','));
        return 0;
    }
    return perr(p, "%s", "Only ALTER TABLE ADD COLUMN and DROP COLUMN are supported");
}

int sq_ddl_parse(const sq_lexed *l, sq_ddl *d, char *msg, size_t msgsz)
{
    memset(d, 0, sizeof *d);
    pst p = { l, 0, msg, msgsz };
    int rc;
    if (word(&p, "CREATE")) {
        if (word(&p, "TABLE"))
            rc = create_table(&p, d);
        else if (word(&p, "INDEX") || (word(&p, "SPATIAL") && word(&p, "INDEX")))
            rc = create_index(&p, d);
        else
            rc = syntax(&p);
    } else if (word(&p, "DROP")) {
        if (word(&p, "TABLE")) {
            d->kind = SQ_DDL_DROP_TABLE;
            d->if_exists = if_exists(&p);
            rc = qname(&p, d->schema, d->table);
            if (!rc && if_exists(&p))
                d->if_exists = 1;   /* H2 also takes IF EXISTS after the name */
        } else if (word(&p, "INDEX")) {
            d->kind = SQ_DDL_DROP_INDEX;
            d->if_exists = if_exists(&p);
            rc = qname(&p, d->schema, d->index);
        } else {
            rc = syntax(&p);
        }
    } else if (word(&p, "ALTER")) {
        rc = word(&p, "TABLE") ? alter_table(&p, d) : syntax(&p);
    } else {
        rc = syntax(&p);
    }
    if (!rc) {
        punct(&p, ';');
        if (p.i != l->ntok)
            rc = syntax(&p);
    }
    if (rc)
        sq_ddl_free(d);
    return rc;
}

void sq_ddl_free(sq_ddl *d)
{
    em_free(d->cols);
    d->cols = NULL;
}
