/* devsel.c: the job's device selection (devsel.h). Pure; any thread. */
#include "devsel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kinds[] = {"cpu", "cuda", "sim"};

static int known_kind(const char *k)
{
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (!strcmp(k, kinds[i]))
            return 1;
    return 0;
}

/* 0..PX_DEVSEL_MAX_INDEX spelled by all of s; -1 otherwise */
static long parse_index(const char *s)
{
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9')
        return -1;
    long n = strtol(s, &end, 10);
    return errno || *end || n > PX_DEVSEL_MAX_INDEX ? -1 : n;
}

px_status_t px_devsel_parse(const char *spec, px_devsel_t *sel_p, char *errbuf, size_t errlen)
{
    char buf[512], *save = NULL, last_kind[8] = "";
    px_devsel_t sel;

    memset(&sel, 0, sizeof(sel));
    if (!spec || !*spec) {
        *sel_p = sel;
        return PX_OK;
    }
    if (strlen(spec) >= sizeof(buf))
        return px_invalid(errbuf, errlen, "devices: value of %zu bytes is too long (at most %zu)",
                          strlen(spec), sizeof(buf) - 1);
    snprintf(buf, sizeof(buf), "%s", spec);
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char kind[8] = "";
        long idx = -1;
        while (*t == ' ')
            t++;
        char *colon = strchr(t, ':');
        int digit = *t >= '0' && *t <= '9';
        if (colon) { /* KIND:I */
            if ((size_t)(colon - t) < sizeof(kind))
                snprintf(kind, sizeof(kind), "%.*s", (int)(colon - t), t);
        } else if (digit) { /* a bare index continues KIND:I */
            snprintf(kind, sizeof(kind), "%s", last_kind);
        } else if (strlen(t) < sizeof(kind)) { /* KIND: all of them */
            snprintf(kind, sizeof(kind), "%s", t);
        }
        if (!known_kind(kind))
            return px_invalid(errbuf, errlen, "devices='%s': '%s' is not a device (cpu, cuda or "
                              "sim, whole or KIND:I[,J...])", spec, t);
        if ((colon || digit) && (idx = parse_index(colon ? colon + 1 : t)) < 0)
            return px_invalid(errbuf, errlen, "devices='%s': '%s': the index is not an integer "
                              "in 0..%d", spec, t, PX_DEVSEL_MAX_INDEX);
        for (int i = 0; i < sel.n; i++) {
            if (strcmp(sel.item[i].kind, kind))
                continue;
            if (sel.item[i].index == idx)
                return px_invalid(errbuf, errlen, "devices='%s': '%s' given twice", spec, t);
            if (sel.item[i].index < 0 || idx < 0)
                return px_invalid(errbuf, errlen, "devices='%s': %s given whole and by index",
                                  spec, kind);
        }
        if (sel.n == PX_DEVSEL_MAX)
            return px_invalid(errbuf, errlen, "devices='%s': more than %d devices", spec,
                              PX_DEVSEL_MAX);
        snprintf(sel.item[sel.n].kind, sizeof(sel.item[sel.n].kind), "%s", kind);
        sel.item[sel.n++].index = (int)idx;
        if (idx >= 0)
            snprintf(last_kind, sizeof(last_kind), "%s", kind);
        else
            last_kind[0] = '\0';
    }
    if (!sel.n)
        return px_invalid(errbuf, errlen, "devices='%s': no device named", spec);
    *sel_p = sel;
    return PX_OK;
}

int px_devsel_match(const px_devsel_t *sel, const char *name)
{
    const char *colon;
    size_t kl;
    long idx;

    if (!sel->n)
        return 1;
    if (!name || !(colon = strchr(name, ':')))
        return 0;
    kl = (size_t)(colon - name);
    /* "cuda:0/1", slot 1 of GPU 0 (parallaxd --gpu-share): GPU 0's */
    char num[16];
    snprintf(num, sizeof(num), "%.*s", (int)(px_device_physical_len(name) - kl - 1), colon + 1);
    idx = parse_index(num);
    for (int i = 0; i < sel->n; i++)
        if (strlen(sel->item[i].kind) == kl && !strncmp(sel->item[i].kind, name, kl) &&
            (sel->item[i].index < 0 || sel->item[i].index == idx))
            return 1;
    return 0;
}

size_t px_device_physical_len(const char *name)
{
    return strcspn(name, "/");
}
