#include "core/gate/pins.h"

#include <stdio.h>
#include <string.h>

#include "core/base/log.h"
#include "core/call/exchange.h"
#include "core/call/gateway.h"
#include "core/conf/conf.h"
#include "policy/pins.h"
#include "policy/policy.h"

int tg_gate_pins_refused(const struct tg_exchange *x, const struct tg_policy *pol, const char *tool,
                         struct tg_decision *dec)
{
    char why[sizeof(dec->message)];
    if (tg_pins_admit_call(x->srv->pins_seen, x->uc->pins, x->uc->name, pol, tool, why, sizeof(why)))
        return 0;
    memset(dec, 0, sizeof(*dec)); /* as a policy decision leaves it: no counter taken, none to log */
    dec->verdict = TG_VERDICT_DENY;
    snprintf(dec->rule, sizeof(dec->rule), "pin");
    snprintf(dec->message, sizeof(dec->message), "%s", why);
    char esc[120];
    tg_log(TG_LOG_INFO, "call refused by pin", "upstream=%s tool=%s", x->uc->name,
           tg_log_esc(esc, sizeof(esc), tg_slice_cstr(tool)));
    return 1;
}
