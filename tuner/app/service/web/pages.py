"""The service's web pages: server-rendered HTML with a little inline script, no build step and
no CDN, so they work offline. The study list polls the API; a study's page follows its
Server-Sent Events stream, so progress, trials, the Pareto front and the learning curves update
while the study runs. Every form carries the session's CSRF token.
"""

from __future__ import annotations

import html
import json
from typing import Any

from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from tuner.app.requests.actions import CancelRequest, DeleteRequest, ExportRequest, ResumeRequest
from tuner.app.requests.studies import ACTIVE, ENDED, EXTERNAL_WORDS
from tuner.app.requests.submit import SubmitRequest
from tuner.app.service.access.auth import COOKIE, SESSION_S, same_origin
from tuner.app.service.access.tokens import User
from tuner.app.service.context import Service, SubmitError
from tuner.export.formats import FORMATS

STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#222}
nav{background:#1f2937;padding:.6em 1em}nav a,nav button{color:#fff;margin-right:1.2em;
text-decoration:none;background:none;border:0;font:inherit;cursor:pointer}
main{padding:1em 1.5em;max-width:1200px}table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #ddd;padding:.3em .5em;text-align:left;font-size:.92em}
.bar{background:#eee;height:.8em;width:12em;display:inline-block}.bar>i{background:#2563eb;
height:100%;display:block}.err{color:#b91c1c}.field-error textarea,.field-error input{
border:2px solid #b91c1c}textarea{width:100%;height:22em;font-family:monospace}
.row{display:flex;gap:2em;flex-wrap:wrap}svg{background:#fafafa;border:1px solid #ddd}
form.inline{display:inline}.note{color:#555;font-size:.9em}
[hidden]{display:none!important}
"""


def register(app: FastAPI, service: Service) -> None:
    """Add the pages to ``app``."""

    def page_user(request: Request) -> User | None:
        try:
            return service.auth.user(request)
        except HTTPException as e:
            if e.status_code == 401:
                return None  # sent to sign in
            raise

    def layout(request: Request, title: str, body: str, who: User | None) -> HTMLResponse:
        csrf = html.escape(service.auth.csrf_token(request))
        signed = (f"<form class='inline' method='post' action='/signout'>"
                  f"<input type='hidden' name='csrf' value='{csrf}'>"
                  f"<button>sign out ({html.escape(who.name)})</button></form>"
                  if who and service.auth.required() else "")
        nav = ("<nav><a href='/'>Studies</a><a href='/submit'>Submit</a>"
               f"<a href='/dashboard'>Optuna dashboard</a>{signed}</nav>")
        return HTMLResponse(f"<!doctype html><html><head><meta charset='utf-8'>"
                            f"<title>{html.escape(title)} · moetune</title>"
                            f"<style>{STYLE}</style></head><body>{nav}<main>{body}</main>"
                            f"</body></html>")

    def signin_redirect() -> Response:
        return RedirectResponse("/signin", status_code=303)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index(request: Request) -> Response:
        who = page_user(request)
        if who is None:
            return signin_redirect()
        body = ("<h1>Studies</h1><table id='studies'><thead><tr><th>study</th><th>owner</th>"
                "<th>state</th><th>progress</th><th>best</th></tr></thead><tbody></tbody>"
                f"</table><p class='note'>Updates every 2 s.</p><script>{LIST_JS}</script>")
        return layout(request, "Studies", body, who)

    @app.get("/studies/{name}", response_class=HTMLResponse, include_in_schema=False)
    def study_page(name: str, request: Request) -> Response:
        who = page_user(request)
        if who is None:
            return signin_redirect()
        data = service.view(name, "detail")
        csrf = html.escape(service.auth.csrf_token(request))
        esc = html.escape(name)

        def button(action: str, label: str) -> str:
            # shown only in the states the action is allowed in (STUDY_JS keeps it so)
            states = BUTTON_STATES[action]
            if action == "cancel" and data.get("attached_owner"):
                states = (*states, "external")  # `serve --attach`: its owner may cancel it
            when = " ".join(states)
            hidden = "" if data["state"] in states else " hidden"
            return (f"<form class='inline' method='post' action='/studies/{esc}/{action}' "
                    f"data-when='{when}'{hidden}>"
                    f"<input type='hidden' name='csrf' value='{csrf}'>"
                    f"<button>{label}</button></form>")

        cli = data["state"] == "external" and not data["owner"]
        body = (f"<h1>{esc}</h1><p>owner <b>{html.escape(data['owner'] or '-')}</b> · state "
                f"<b id='state'>{html.escape(data['state'])}</b>"
                + (f" ({html.escape(EXTERNAL_WORDS)})" if cli else "")
                + " · <span id='progress'></span>"
                f"</p><p>{button('cancel', 'Cancel')} {button('resume', 'Resume')} "
                f"{button('delete', 'Delete')} <a href='/api/v1/studies/{esc}/report'>Report</a>"
                f"</p><p id='ties'></p><div class='row'><div id='frontbox'><h3>Pareto front</h3>"
                f"<svg id='front' width='420' height='300'></svg></div>"
                f"<div><h3>Learning curves (val_loss)</h3>"
                f"<svg id='curves' width='420' height='300'></svg></div></div>"
                f"<div id='ladder' hidden><h3>Ladder rungs</h3><p class='note'>Each width's "
                f"own trials (the promoted ones from the rung below, then any new ones) and "
                f"its best by the first objective.</p><table id='rungs'><thead></thead>"
                f"<tbody></tbody></table></div>"
                f"<div id='law' hidden><h3>Law grid</h3><p id='lawanswer'></p>"
                f"<p class='note'>Each budget's optimum "
                f"from all its trials (a response surface, 95% interval), best-of-n beside "
                f"it; the lr law through the budgets placed so far. Measured on this study's "
                f"proxy; the law's line is a fit.</p><svg id='lawplot' width='420' "
                f"height='300'></svg><table id='lawtable'><thead></thead><tbody></tbody>"
                f"</table><p id='lawheld'></p></div>"
                f"<h3>Trials</h3><table id='trials'><thead></thead><tbody></tbody></table>"
                f"{_export_form(esc, csrf)}"
                f"<script>const STUDY={json.dumps(name)};{STUDY_JS}</script>")
        return layout(request, name, body, who)

    @app.get("/submit", response_class=HTMLResponse, include_in_schema=False)
    def submit_page(request: Request) -> Response:
        who = page_user(request)
        if who is None:
            return signin_redirect()
        return layout(request, "Submit", _submit_form(service, request, "", "", None), who)

    @app.post("/submit", include_in_schema=False)
    def submit_form(request: Request, spec: str = Form(""), name: str = Form(""),
                    csrf: str = Form("")) -> Response:
        who = page_user(request)
        if who is None:
            return signin_redirect()
        service.auth.check_csrf(request, csrf)
        try:
            study = service.submit(SubmitRequest.from_body(spec, name=name.strip() or None),
                                   who)
        except SubmitError as e:
            form = _submit_form(service, request, spec, name, e)
            response = layout(request, "Submit", form, who)
            response.status_code = e.status
            return response
        return RedirectResponse(f"/studies/{study}", status_code=303)

    @app.post("/studies/{name}/export", include_in_schema=False)
    def export_form(name: str, request: Request, csrf: str = Form(""),
                    pick: str = Form("knee"), target: str = Form(""),
                    hardware: str = Form("h800"), gpus: str = Form(""), tokens: str = Form(""),
                    format: str = Form("native")) -> Response:
        who = page_user(request)
        if who is None:
            return signin_redirect()
        service.auth.check_csrf(request, csrf)
        options: dict[str, Any] = {"pick": pick.split(), "target": target,
                                   "hardware": hardware, "gpus": gpus, "tokens": tokens,
                                   "format": format}
        body, filename, media_type = service.export(ExportRequest.from_options(name, options))
        return Response(body, media_type=media_type,
                        headers={"Content-Disposition": f'attachment; filename="{filename}"'})

    @app.post("/studies/{name}/{action}", include_in_schema=False)
    def act(name: str, action: str, request: Request, csrf: str = Form("")) -> Response:
        """The study page's Cancel, Resume and Delete buttons."""
        if action not in ("cancel", "resume", "delete"):
            raise HTTPException(404, f"action: must be cancel, resume or delete, but got "
                                     f"{action!r}.")
        who = page_user(request)
        if who is None:
            return signin_redirect()
        service.auth.check_csrf(request, csrf)
        try:
            if action == "cancel":
                service.cancel(CancelRequest(study=name, by=who.name), who)
            elif action == "delete":
                service.delete(DeleteRequest(study=name), who)
            else:
                service.resume(ResumeRequest(study=name), who)
        except HTTPException as e:
            if e.status_code not in (409, 507):  # refused in the study's state or past the
                raise  # owner's disk quota: said on a page, not JSON
            esc = html.escape(name)
            response = layout(request, name, f"<h1>{esc}</h1><p class='err' id='error'>"
                              f"{html.escape(str(e.detail))}</p><p><a href='/studies/{esc}'>"
                              f"back to {esc}</a></p>", who)
            response.status_code = e.status_code
            return response
        return RedirectResponse("/" if action == "delete" else f"/studies/{name}",
                                status_code=303)

    @app.get("/signin", response_class=HTMLResponse, include_in_schema=False)
    def signin_page(request: Request) -> Response:
        return layout(request, "Sign in", _signin_form(""), None)

    @app.post("/signin", include_in_schema=False)
    def signin(request: Request, token: str = Form("")) -> Response:
        if same_origin(request) is False:  # another site signing the browser in as someone
            raise HTTPException(403, "origin: sign in from this service's own page, but got "
                                     f"Origin {request.headers.get('origin', 'none')!r}.")
        cookie = service.auth.sign_in(token.strip())
        if cookie is None:
            response = layout(request, "Sign in", _signin_form("unknown token"), None)
            response.status_code = 401
            return response
        signed_in = RedirectResponse("/", status_code=303)
        signed_in.set_cookie(COOKIE, cookie, max_age=SESSION_S, httponly=True,
                             samesite="strict", secure=request.url.scheme == "https")
        return signed_in

    @app.post("/signout", include_in_schema=False)
    def signout(request: Request, csrf: str = Form("")) -> Response:
        service.auth.check_csrf(request, csrf)
        service.auth.sign_out(request)
        response = RedirectResponse("/signin", status_code=303)
        response.delete_cookie(COOKIE)
        return response


def _submit_form(service: Service, request: Request, spec: str, name: str,
                 error: SubmitError | None) -> str:
    csrf = html.escape(service.auth.csrf_token(request))
    problem = ""
    if error:  # said once (the message names no field twice), beside the field it names
        text = str(error).removeprefix(f"{error.field}: ")
        problem = (f"<p class='err' id='error' data-field='{html.escape(error.field)}'>"
                   f"<b>{html.escape(error.field)}</b>: {html.escape(text)}</p>")
    on_name = bool(error) and error.field == "study.name"  # type: ignore[union-attr]
    spec_error = " field-error" if error and not on_name else ""
    name_error = " field-error" if on_name else ""
    return (f"<h1>Submit a study</h1><form method='post' action='/submit'>"
            f"<input type='hidden' name='csrf' value='{csrf}'>"
            f"<p class='{name_error}'>name (optional, overrides [study] name) "
            f"<input name='name' value='{html.escape(name)}'></p>{problem if on_name else ''}"
            f"{'' if on_name else problem}"
            f"<div class='{spec_error}'><textarea name='spec' placeholder='[study]\\n"
            f"name = \"my-study\"\\n...'>{html.escape(spec)}</textarea></div>"
            f"<p><button>Submit</button></p><p class='note'>The space inline, or a space "
            f"shipped with moetune ([space] file = \"deepseek_v3.toml\"); data and model "
            f"paths are absolute paths on the cluster.</p></form>")


def _signin_form(error: str) -> str:
    problem = f"<p class='err'>{html.escape(error)}</p>" if error else ""
    return ("<h1>Sign in</h1><form method='post' action='/signin'>"
            f"{problem}<p>token <input name='token' type='password' size='50'></p>"
            "<p><button>Sign in</button></p><p class='note'>Tokens come from "
            "<code>moetune token create USER</code> on the service's machine.</p></form>")


def _export_form(study: str, csrf: str) -> str:
    return (f"<h3>Export</h3><form method='post' action='/studies/{study}/export'>"
            f"<input type='hidden' name='csrf' value='{csrf}'>"
            "pick <input name='pick' value='knee' size='8'> target <input name='target' "
            "value='deepseek-v3-671b' size='22'> hardware <input name='hardware' value='h800' "
            "size='6'> GPUs <input name='gpus' value='2048' size='6'> tokens <input "
            "name='tokens' value='14.8e12' size='9'> format <select name='format'>"
            # every launch format the export renders, from its one registry
            + "".join(f"<option>{html.escape(name)}</option>" for name in FORMATS)
            + "</select> <button>Download</button></form>")


# the states a study page's button is shown in: those its action is allowed from (studies.py)
BUTTON_STATES = {"cancel": ("queued", *ACTIVE), "resume": ("cancelled", "failed", "interrupted"),
                 "delete": ENDED}

LIST_JS = "const EXTERNAL=" + json.dumps(EXTERNAL_WORDS) + ";" + """
const esc=s=>String(s??'').replace(/[&<>"']/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;',
'"':'&quot;',"'":'&#39;'}[c]));
const byName=(a,b)=>a.name.localeCompare(b.name,'en',{numeric:true});
async function refresh(){const r=await fetch('/api/v1/studies');if(!r.ok)return;
const rows=(await r.json()).sort(byName).map(s=>{const p=s.progress,
pct=p.total?100*p.done/p.total:0;
const best=p.best?Object.entries(p.best.values).map(([k,v])=>esc(k)+'='+(v===null?'-':
Number(v).toPrecision(4))).join(' ')+' (#'+p.best.trial+')':'';
return `<tr><td><a href="/studies/${encodeURIComponent(s.name)}">${esc(s.name)}</a></td>
<td>${s.owner?esc(s.owner):s.state==='external'?'<i title="'+esc(EXTERNAL)+
'">command line</i>':''}</td><td>${esc(s.state)}</td><td><span class="bar"><i style="width:
${pct}%"></i></span> ${p.done}/${p.total} (${p.running} running)</td><td>${best}</td></tr>`});
document.querySelector('#studies tbody').innerHTML=rows.join('');}
refresh();setInterval(refresh,2000);
"""

STUDY_JS = """
const esc=s=>String(s??'').replace(/[&<>"']/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;',
'"':'&quot;',"'":'&#39;'}[c]));
const num=v=>Number.isInteger(v)?String(v):Number(v).toPrecision(4);
const inline=s=>esc(s).replace(/`([^`]+)`/g,'<code>$1</code>');
const fmt=v=>v===null||v===undefined?'-':(typeof v==='number'?num(v):esc(v));
function scale(vals,lo,hi){const a=Math.min(...vals),b=Math.max(...vals),s=b>a?b-a:1;
const f=v=>lo+(v-a)/s*(hi-lo);f.lo=a;f.hi=b;return f;}
function axes(X,Y,xl,yl){const t=[0,.5,1];let g='<g class="axes" stroke="#6b7280">'+
'<line x1="40" y1="270" x2="400" y2="270"/><line x1="40" y1="20" x2="40" y2="270"/></g>';
for(const k of t){const xv=X.lo+k*(X.hi-X.lo),yv=Y.lo+k*(Y.hi-Y.lo);
const tick=v=>{const a=Math.abs(v);return a>=1e6?+(v/1e6).toPrecision(3)+'M':a>=1e4?
+(v/1e3).toPrecision(3)+'k':a&&a<1e-2?v.toExponential(1):num(+v.toPrecision(3));};
g+=`<text class="tick" x="${X(xv)}" y="283" font-size="9" text-anchor="middle">${tick(xv)}`+
`</text><text class="tick" x="37" y="${Y(yv)+3}" font-size="9" text-anchor="end">${tick(yv)}`+
'</text>';}
return g+`<text x="220" y="297" font-size="11" text-anchor="middle">${esc(xl)}</text>`+
`<text x="4" y="12" font-size="11">${esc(yl)}</text>`;}
const legend=items=>'<g class="legend">'+items.map(([c,l],i)=>
`<rect x="250" y="${24+i*14}" width="9" height="9" fill="${c}"/>`+
`<text x="263" y="${32+i*14}" font-size="10">${esc(l)}</text>`).join('')+'</g>';
const tiedWithKnee=(d,t)=>!!d.knee_ties&&d.knee_ties.tied.includes(t.number);
const mark=(d,t)=>d.knee===t.number?' (knee)':tiedWithKnee(d,t)?' (tied with the knee)':'';
function front(d){const svg=document.getElementById('front');const o=d.objectives;
document.getElementById('frontbox').hidden=o.length<2;if(o.length<2)return;
const pts=d.trials.filter(t=>t.feasible&&Object.values(t.values).every(v=>v!==null));
if(!pts.length||o.length<2){svg.innerHTML='<text x="10" y="20">no feasible trial with two '+
'objectives yet</text>';return;}
const xs=pts.map(t=>t.values[o[0].name]),ys=pts.map(t=>t.values[o[1].name]);
const X=scale(xs,40,400),Y=scale(ys,270,20);
svg.innerHTML=pts.map(t=>{const f=d.front.includes(t.number),k=d.knee===t.number,
g=tiedWithKnee(d,t);
return `<circle cx="${X(t.values[o[0].name])}" cy="${Y(t.values[o[1].name])}" r="${k?8:5}"
fill="${f?'#d62728':'#1f77b4'}" stroke="${k||g?'#000':'none'}" stroke-width="${k?2:1}"
stroke-dasharray="${g?'2,2':''}"><title>#${t.number}${mark(d,t)}: ${esc(o[0].name)} ${
fmt(t.values[o[0].name])}, ${esc(o[1].name)} ${fmt(t.values[o[1].name])}</title></circle>`})
.join('')+
axes(X,Y,o[0].name,o[1].name)+legend([['#d62728','Pareto front'],['#1f77b4','other feasible']]);}
function curves(d){const svg=document.getElementById('curves');
const cs=d.trials.filter(t=>t.curve.length);if(!cs.length){svg.innerHTML='';return;}
const xs=cs.flatMap(t=>t.curve.map(p=>p[0])),ys=cs.flatMap(t=>t.curve.map(p=>p[1]));
const X=scale(xs,40,400),Y=scale(ys,270,20);
svg.innerHTML=cs.map(t=>{const last=t.curve[t.curve.length-1];
return `<polyline fill="none" stroke="${d.front.includes(t.number)?'#d62728':
t.outcome==='running'?'#2563eb':'#9ca3af'}" points="${t.curve.map(p=>X(p[0])+','+Y(p[1]))
.join(' ')}"><title>#${t.number} (${esc(t.outcome)}): val_loss ${fmt(last[1])} at ${
fmt(last[0])} tokens</title></polyline>`}).join('')+axes(X,Y,'tokens','val_loss')+
legend([['#d62728','Pareto front'],['#2563eb','running'],['#9ca3af','other']]);}
function table(d){const names=d.objectives.map(o=>o.name);
const params=[...new Set(d.trials.flatMap(t=>Object.keys(t.params)))];
document.querySelector('#trials thead').innerHTML='<tr><th>#</th><th>outcome</th>'+
names.map(n=>`<th>${esc(n)}</th>`).join('')+params.map(p=>`<th>${esc(p)}</th>`).join('')+
'<th>reason</th></tr>';
document.querySelector('#trials tbody').innerHTML=d.trials.map(t=>`<tr><td>${t.number}${
mark(d,t)}</td><td>${esc(t.outcome)}</td>${names.map(n=>
`<td>${fmt(t.values[n])}</td>`).join('')}${params.map(p=>`<td>${fmt(t.params[p])}</td>`)
.join('')}<td>${esc(t.reason.split('\\n').pop())}</td></tr>`).join('');}
function ladder(d){const box=document.getElementById('ladder');box.hidden=!d.ladder;
if(!d.ladder)return;document.querySelector('#rungs thead').innerHTML='<tr><th>width</th><th>'+
'state</th><th>trials</th><th>best</th></tr>';
document.querySelector('#rungs tbody').innerHTML=d.ladder.rungs.map(r=>`<tr><td>${r.width}`+
`</td><td>${esc(r.state)}</td><td>${r.done}/${r.total??'?'}${r.running?`, ${r.running} `+
'running':''}</td><td>${r.best?`#${r.best.number}: ${esc(r.best.objective)} ${fmt(
r.best.value)} at lr ${fmt(r.best.lr)}`:'-'}</td></tr>`).join('');}
const lg=v=>Math.log10(v);
function law(d){const box=document.getElementById('law');box.hidden=!d.law;if(!d.law)return;
const L=d.law,bs=L.budgets,placed=bs.filter(b=>b.optimum);
document.querySelector('#lawtable thead').innerHTML='<tr><th>tokens per trial</th><th>'+
'state</th><th>trials</th><th>lr* [95%]</th><th>batch* (tokens)</th><th>best-of-n lr (loss)'+
'</th><th>note</th></tr>';
document.querySelector('#lawtable tbody').innerHTML=bs.map(b=>{const o=b.optimum;
const edge=o&&o.at_edge.length?`at the range's edge (${o.at_edge.join(', ')})`:'';
const note=b.held_out?'held out'+(L.predicted?`: predicted lr ${fmt(L.predicted.lr)}`:
''):b.held_out_batch!=null?`held-out batch (batch_end ${b.held_out_batch}): predicted, `+
'never in the law'
:b.left_out_p!=null?`left out of the lr law: with it one power law did not hold (p ${
fmt(b.left_out_p)})`:b.in_lr_law?'in the '+(L.lr_method==='pooled'?'pooled ':'')+'lr law'+
(edge?`, ${edge}`:''):edge?edge+': left out':b.error?b.error:'';
return `<tr><td>${fmt(b.tokens)}</td><td>${esc(b.state)}</td><td>${b.done}/${b.total}${
b.running?`, ${b.running} running`:''}</td><td>${o?`${fmt(o.lr)} [${fmt(o.lr_interval[0])}, ${
fmt(o.lr_interval[1])}]`:'-'}</td><td>${o&&o.batch_placed?fmt(o.batch):'-'}</td><td>${
b.best?`${fmt(b.best.lr)} (${fmt(b.best.loss)})`:'-'}</td><td>${esc(note)}</td></tr>`})
.join('');
const svg=document.getElementById('lawplot');
const xs=bs.map(b=>lg(b.tokens)),ys=[];placed.forEach(b=>ys.push(lg(b.optimum.lr_interval[0]),
lg(b.optimum.lr_interval[1])));bs.forEach(b=>{if(b.best)ys.push(lg(b.best.lr));});
if(L.predicted)ys.push(lg(L.predicted.lr_band[0]),lg(L.predicted.lr_band[1]));
if(!ys.length){svg.innerHTML='<text x="10" y="20">no budget placed yet</text>';return;}
const X=scale(xs,40,400),Y=scale(ys,270,20);let g='';
if(L.lr_law){const a=L.lr_law,x0=Math.min(...xs),x1=Math.max(...xs),
f=x=>lg(a.coef)+a.exponent*x;g+=`<line x1="${X(x0)}" y1="${Y(f(x0))}" x2="${X(x1)}" y2="${
Y(f(x1))}" stroke="#2563eb"><title>${L.lr_method==='pooled'?'pooled ':''}lr law: exponent ${
fmt(a.exponent)} [${fmt(a.exponent_interval[0])}, ${fmt(a.exponent_interval[1])}]${
L.lack_of_fit_p!=null?`; one power law: p ${fmt(L.lack_of_fit_p)}`:''}</title></line>`;}
for(const b of placed){const o=b.optimum,x=X(lg(b.tokens));
g+=`<line x1="${x}" x2="${x}" y1="${Y(lg(o.lr_interval[0]))}" y2="${Y(lg(o.lr_interval[1]))}" `+
`stroke="#111"/><circle cx="${x}" cy="${Y(lg(o.lr))}" r="5" fill="${b.held_out?'#d62728':
'#111'}"><title>${fmt(b.tokens)} tokens: lr* ${fmt(o.lr)} [${fmt(o.lr_interval[0])}, ${
fmt(o.lr_interval[1])}]</title></circle>`;}
for(const b of bs.filter(b=>b.best))g+=`<circle cx="${X(lg(b.tokens))}" cy="${Y(lg(b.best.lr))}"`+
` r="4" fill="none" stroke="#6b7280"><title>best of ${b.done}: lr ${fmt(b.best.lr)}</title>`+
'</circle>';
if(L.predicted){const x=X(lg(bs[bs.length-1].tokens));g+=`<rect x="${x-6}" width="12" y="${
Y(lg(L.predicted.lr_band[1]))}" height="${Y(lg(L.predicted.lr_band[0]))-Y(lg(L.predicted.
lr_band[1]))}" fill="#d6272833"><title>predicted before it ran: lr ${fmt(L.predicted.lr)} [${
fmt(L.predicted.lr_band[0])}, ${fmt(L.predicted.lr_band[1])}]</title></rect>`;}
svg.innerHTML=g+axes(X,Y,'log10 tokens per trial','log10 lr*')+legend([['#111',
'optimum, 95% interval'],['#6b7280','best of n (hollow)'],['#2563eb','lr law (fit)'],
['#d62728','held out: predicted (band)']]);
document.getElementById('lawanswer').textContent=L.answer||'';
const h=L.held_out_check;document.getElementById('lawheld').textContent=h?
`held out at ${fmt(h.tokens)} tokens`+(h.at_batch?` and ${fmt(h.at_batch)} tokens per step `+
'(the one batch searched)':'')+`: lr predicted ${fmt(h.lr_predicted)}, measured ${
fmt(h.lr_measured)} (ratio ${fmt(h.lr_ratio)}, `+(h.lr_inside?'inside the predicted band)':
'outside the predicted band: the law missed its own check)')+
(h.loss_gap_sd!==undefined?`; the predicted `+
`recipe's val_loss ${fmt(h.loss_gap_sd)} sd from the optimum (fitted)`+
(h.loss_gap_best_sd!==undefined?`, ${fmt(h.loss_gap_best_sd)} sd from the best searched trial `+
'(measured)':'')+(h.sd_measured?' (measured noise)':' (sd: the fit residual; noise not '+
'measured)')+(h.floor_below_trials?'; the fitted minimum lies over 2 sd below every trial: '+
'read the measured gap':''):''):'';}
function show(d){document.getElementById('state').textContent=d.state;
document.querySelectorAll('[data-when]').forEach(f=>{f.hidden=
!f.dataset.when.split(' ').includes(d.state);});
const p=d.progress;document.getElementById('progress').textContent=
`${p.done}/${p.total} trials done, ${p.running} running`;
document.getElementById('ties').innerHTML=d.knee_ties?inline(d.knee_ties.sentence):'';
front(d);curves(d);table(d);ladder(d);law(d);}
fetch('/api/v1/studies/'+encodeURIComponent(STUDY)).then(r=>r.json()).then(show);
const es=new EventSource('/api/v1/studies/'+encodeURIComponent(STUDY)+'/events');
es.addEventListener('progress',e=>show(JSON.parse(e.data)));
es.addEventListener('end',()=>es.close());
"""
