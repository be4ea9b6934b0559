"""What may be reached, listed and run: policy rules (``rules``), tag filters (``tags``) and the
import roots a toolkit's code may come from (``trust``).

``toolcat.policy`` keeps the names it had as a module (they live in ``rules``).
"""

from .rules import MAX_RULE_LENGTH, Guard, Policy, Rule, parse_rule, rule_matches, rules_sql

__all__ = ["MAX_RULE_LENGTH", "Guard", "Policy", "Rule", "parse_rule", "rule_matches", "rules_sql"]
