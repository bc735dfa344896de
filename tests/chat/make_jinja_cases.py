#!/usr/bin/env python3
"""Writes tests/chat/jinja_cases.json: small templates rendered by Jinja2 set
up as Hugging Face transformers' apply_chat_template does (see
tests/fixtures/chat/README.md), for chat_template_test to compare against.
Needs python3-jinja2 only to regenerate (the file was made with Jinja2 3.1.6).

Each case: {"template", "context" (JSON object), and "expected" (text) or
"error" (the Python exception, "Class: message")}.
"""
import datetime
import json
import os

from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body
                               ).set_lineno(lineno)

    def _render(self, caller):
        return caller()


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None,
           sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.datetime(2026, 1, 15).strftime(fmt)


def render(source, context):
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source).render(**context)


MSGS = [{"role": "system", "content": "  Be brief.  "},
        {"role": "user", "content": "Hi <there>?"},
        {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello."},
        {"role": "user", "content": "Ünï 🎉\nmore"}]

CASES = [
    # Whitespace control: trim_blocks, lstrip_blocks, -, +.
    ("a\n  {% if true %}\n  b\n  {% endif %}\nc\n", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c", {}),
    ("  {{ 1 }}  \n  {# note #}\n x", {}),
    ("  {%+ if true %}x{% endif +%}\ny", {}),
    ("line\n    {%- set x = 1 %}\n{{ x }}", {}),
    ("{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n", {}),
    ("a {#- c -#} b {# d #}\ne", {}),
    ("x\r\ny\rz\n\n", {}),
    ("{{ 'a' }}\n{{ 'b' }}\n", {}),
    ("\t {% if 1 %}t{% endif %}", {}),
    # Literals, operators, precedence.
    ("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} "
     "{{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1.5 + 1 }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] + [2, 3] }}", {}),
    ("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }}", {}),
    ("{{ not 1 == 2 }} {{ 0 or 'x' }} {{ 1 and 0 }} {{ none or [] }}", {}),
    ("{{ 'x' if false }}|{{ 'y' if true else 'z' }}|"
     "{{ 1 if 0 else 2 if 0 else 3 }}", {}),
    ("{{ -3 | abs }} {{ - 3 }} {{ 10 - -2 }}", {}),
    ("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} "
     "{{ 'z' not in 'abc' }}", {}),
    ("{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}] }} {{ (1,) }} {{ () }}",
     {}),
    ("{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.0 }} {{ 123456789.5 }} {{ 1e-5 }}", {}),
    ("{{ \"it's\" }} {{ ['it\\'s', \"q\\\"\"] }} {{ '\\u00e9\\n\\t|' }}", {}),
    # Access and slicing.
    ("{{ messages[0].role }} {{ messages[-1]['role'] }} {{ messages[9] }}|"
     "{{ messages[1].missing }}|{{ messages[0].content.missing }}",
     {"messages": MSGS}),
    ("{{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ 'hello'[-2:] }} "
     "{{ [1, 2, 3, 4][1::2] }} {{ 'Ünïcödé'[1:4] }} {{ [1, 2][5:] }}", {}),
    ("{% for m in messages[::-1] %}{{ m.role }},{% endfor %}",
     {"messages": MSGS}),
    ("{{ messages[0]['content'][2:4] }}", {"messages": MSGS}),
    # Filters.
    ("{{ messages[0].content | trim }}|{{ '  x\\n' | trim }}|"
     "{{ 'xxaxx' | trim('x') }}", {"messages": MSGS}),
    ("{{ messages | length }} {{ 'Ünï' | length }} {{ {'a': 1} | count }}",
     {"messages": MSGS}),
    ("{{ messages[1] | tojson }}|{{ {'b': [1, 2.5, none, true], 'é': '\"\\n'}"
     " | tojson }}", {"messages": MSGS}),
    ("{{ {'a': {'b': [1, {}], 'c': []}} | tojson(indent=2) }}", {}),
    ("{{ {'z': 'é🎉', 'a': [1]} | tojson(ensure_ascii=true, sort_keys=true) }}"
     "|{{ {'z': 'é'} | tojson(ensure_ascii=False) }}", {}),
    ("{% for k, v in {'x': 1, 'y': 2} | items %}{{ k }}={{ v }};{% endfor %}"
     "{% for k, v in {'z': 3}.items() %}{{ k }}{{ v }}{% endfor %}", {}),
    ("{{ messages | selectattr('role', 'equalto', 'user') | list | length }}"
     " {{ messages | rejectattr('role', 'eq', 'user') | map(attribute='role')"
     " | join(',') }}", {"messages": MSGS}),
    ("{{ [1, 0, 2] | select | list }} {{ [1, 2, 3, 4] | reject('odd') | list }}"
     " {{ ['a', 'b'] | map('upper') | join }}", {}),
    ("{{ 'Hello World' | lower }} {{ 'hi' | upper }} {{ 'hello wORLD' | title }}"
     " {{ 'hELLO' | capitalize }} {{ 'a-b-c' | replace('-', '+') }}", {}),
    ("{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} "
     "{{ ['b', 'A', 'a'] | unique | list }} {{ [1, 2] | first }}"
     "{{ [1, 2] | last }} {{ [1, 2, 3] | sum }} {{ [4, 9] | max }}", {}),
    ("{{ undefined_var | default('dflt') }} {{ '' | default('e', true) }} "
     "{{ none | default('n') }} {{ x | d('y') }}", {}),
    ("{{ '42' | int + 1 }} {{ 'x' | int }} {{ '2.5' | float }} {{ 3 | float }}"
     " {{ 5 | string + 'a' }} {{ [1] | string }}", {}),
    ("{{ [1, 2] | join('-') }} {{ 'abc' | list }} {{ 'abc' | reverse }} "
     "{{ [1, 2] | reverse | list }} {{ '<a&b>' | e }}", {}),
    ("{{ {'b': 1, 'a': 2} | dictsort }}", {}),
    # Tests.
    ("{{ x is defined }} {{ x is undefined }} {{ none is none }} "
     "{{ 'a' is string }} {{ 1 is number }} {{ 1 is integer }} "
     "{{ 1.0 is float }} {{ {} is mapping }} {{ [] is iterable }} "
     "{{ 'a' is iterable }} {{ 3 is odd }} {{ 4 is even }} "
     "{{ 9 is divisibleby 3 }} {{ 1 is sameas true }} {{ false is false }}"
     " {{ true is boolean }} {{ 'ab' is lower }} {{ 2 is in [1, 2] }}", {}),
    ("{{ messages[0].content is not none }} {{ x is not defined }} "
     "{{ messages is sequence }} {{ 1 is eq 1 }} {{ 2 is gt 1 }}",
     {"messages": MSGS}),
    # String methods.
    ("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} "
     "{{ '  a b  '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|"
     "{{ '\\n\\nab\\n'.rstrip('\\n') }}|{{ 'a,b,,c'.split(',') }} "
     "{{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} "
     "{{ 'aaa'.replace('a', 'b', 2) }} {{ 'ab'.upper() }} {{ 'AB'.lower() }}"
     " {{ 'abc'.find('c') }} {{ 'abab'.count('ab') }} "
     "{{ '-'.join(['x', 'y']) }}", {}),
    ("{% set c = messages[2].content %}"
     "{{ c.split('</think>')[-1].lstrip('\\n') }}|"
     "{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1]"
     ".lstrip('\\n') }}", {"messages": MSGS}),
    ("{{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b') }} "
     "{{ {'a': 1}.get('b', 2) }} {{ {'a': 1}.keys() | list }} "
     "{{ {'a': 1}.values() | list }}", {}),
    # Loops.
    ("{% for m in messages %}{{ loop.index }}{{ loop.index0 }}"
     "{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
     " {% endfor %}", {"messages": MSGS}),
    ("{% for i in [1, 2, 3, 4] if i is even %}{{ i }}{{ loop.last }}"
     "{% else %}none{% endfor %}|{% for i in [] %}x{% else %}empty{% endfor %}",
     {}),
    ("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}"
     "{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}"
     "{% for c in 'ab' %}{{ c }}.{% endfor %}{% for k in {'x': 1} %}{{ k }}"
     "{% endfor %}", {}),
    ("{% for i in range(3) %}{% for j in range(i) %}{{ loop.index }}"
     "{% endfor %}{{ loop.index }};{% endfor %} {{ range(2, 8, 3) | list }}",
     {}),
    ("{% for x in [1, 2] %}{{ loop.previtem }}-{{ loop.nextitem }};"
     "{% endfor %}", {}),
    # Scoping: set, namespace, macros.
    ("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}"
     "{% endfor %}{{ x }}", {}),
    ("{% set ns = namespace(n=0, items=[]) %}{% for i in [1, 2, 3] %}"
     "{% set ns.n = ns.n + i %}{% set ns.items = ns.items + [i] %}"
     "{% endfor %}{{ ns.n }} {{ ns.items }}", {}),
    ("{% set ns = namespace() %}{% set ns.a = 'v' %}{{ ns.a }}"
     "{{ ns.missing is defined }}", {}),
    ("{% if true %}{% set y = 5 %}{% endif %}{{ y }}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (3, 4) %}{{ t }}", {}),
    ("{% set block %}inner {{ 1 + 1 }}{% endset %}[{{ block }}]", {}),
    ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
     "{{ greet('a') }} {{ greet('b', '?') }} {{ greet(name='c') }}", {}),
    ("{%- macro m(x) -%}\n  [{{ x }}]\n{%- endmacro -%}\n{{ m(1) }}{{ m(2) }}",
     {}),
    ("{% macro outer() %}{% set v = 1 %}{{ v }}{% endmacro %}{{ outer() }}"
     "{{ v }}", {}),
    ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
    # Globals.
    ("{{ strftime_now('%Y-%m-%d %B %d, %Y %A %j') }}", {}),
    ("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}",
     {"bos_token": "<s>", "add_generation_prompt": True}),
    ("{{ dict(a=1) }} {{ namespace(a=2).a }}", {}),
    # Errors.
    ("{{ raise_exception('custom message') }}", {}),
    ("{{ undefined_thing.attr }}", {}),
    ("{{ 1 + 'a' }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ 'a' < 1 }}", {}),
    ("{% for x in none %}{% endfor %}", {}),
    ("{% set x = 1 %}{% set x.y = 2 %}", {}),
    ("{{ none + 1 }}", {}),
    ("{{ undefined_fn() }}", {}),
    ("{{ 'abc'.split('') }}", {}),
    ("{{ [1, 2][::0] }}", {}),
    ("{% set a, b = [1, 2, 3] %}", {}),
    ("{{ 1 in 2 }}", {}),
    ("{{ undefined_thing + 1 }}", {}),
    ("{% for k in messages | items %}{% endfor %}", {"messages": MSGS}),
]


def main():
    out = []
    for source, context in CASES:
        case = {"template": source, "context": context}
        try:
            case["expected"] = render(source, context)
        except TemplateError as e:
            case["error"] = str(e)
        except Exception as e:  # what a render raised, as Python names it
            case["error"] = f"{type(e).__name__}: {e}"
        out.append(case)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "jinja_cases.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(out)} cases -> {path}")


if __name__ == "__main__":
    main()
