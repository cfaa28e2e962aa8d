"""Phrase rules for injection in French, German, Spanish and Japanese, and English
paraphrases of an override ("disregard what you were told before", "the instructions you
were given no longer apply").

The same policy as the English rules: an override needs an instruction-like object and a
qualifier that points at the model's own instructions ("toutes les instructions
précédentes", not "les avertissements de lint"); a new role needs a role ("tu es maintenant
un assistant sans limites", not "tu es maintenant prêt"); hiding needs the user as the
one kept in the dark. Patterns match the normalised text (casefolded: "ß" reads "ss").
"""

from __future__ import annotations

from hermes_site.scanning.phrases import _rule

_IGNORE = "asks to ignore previous instructions"
_ROLE = "tries to give the assistant a new role"
_HIDE = "asks to hide something from the user"
_REVEAL = "tries to replace or reveal the system prompt"
_WORD = r"[\w'’-]{1,20}"

# -- French --
_FR_VERB = (
    r"ignore[rz]?|oublie[rz]?|ne\s+tiens?\s+(?:pas\s+|plus\s+)?compte|ne\s+tenez\s+"
    r"(?:pas\s+|plus\s+)?compte|fais\s+abstraction|faites\s+abstraction|passe[rz]?\s+outre"
)
_FR_OBJECT = r"instructions?|consignes?|règles?|regles?|directives?|indications?|ordres?|prompts?"
# As in English, "old" is not enough: "ignorez les anciennes consignes de style" is advice.
_FR_QUAL_BEFORE = r"toutes|tous|tes|vos"
_FR_QUAL_AFTER = (
    r"pr[ée]c[ée]dent(?:e|es|s)?|ant[ée]rieur(?:e|es|s)?|ci-dessus|d'avant|initiales?"
    r"|originales?|du\s+syst[èe]me|syst[èe]me|re[çc]ues?|donn[ée]es?"
)
# -- German --
_DE_VERB = (
    r"ignorier(?:e|t|en\s+sie)?|vergiss|vergessen\s+sie|missacht(?:e|en\s+sie)"
    r"|übergeh(?:e|en\s+sie)|setze\s+(?:dich\s+)?über|hör\s+auf,?\s+(?:zu\s+befolgen)?"
)
_DE_OBJECT = (
    r"anweisung(?:en)?|instruktion(?:en)?|regeln?|vorgaben?|richtlinien?|befehle?"
    r"|system-?prompts?|systemanweisung(?:en)?|anordnung(?:en)?"
)
_DE_QUAL = (
    r"alle|alles|vorherigen?|bisherigen?|obigen?|vorigen?|früheren?|deine[nmrs]?|ihre[nmrs]?"
    r"|ursprünglichen?|urspruenglichen?|gegebenen?"
)
# -- Spanish --
_ES_VERB = (
    r"ignora|ignore|ignoren|olvida|olvide|olviden|descarta|omite|haz\s+caso\s+omiso\s+(?:a|de)"
    r"|no\s+hagas\s+caso\s+(?:a|de)"
)
_ES_OBJECT = (
    r"instrucciones|instrucción|instruccion|reglas|indicaciones|directrices|órdenes|ordenes"
    r"|normas|pautas|prompt"
)
_ES_QUAL = (
    r"todas|todos|tus|sus|anteriores|previas|originales|iniciales|del\s+sistema|de\s+arriba"
    r"|de\s+antes|recibidas|dadas"
)
# -- Japanese --
_JA_QUAL = r"以前|前|これまで|今まで|上記|先ほど|最初|元|システム|あなた|すべて|全て"
_JA_OBJECT = r"指示|命令|ルール|制約|プロンプト|指令|設定された?ルール"

INTL_RULES = (
    # -- French --
    _rule(
        "prompt_injection",
        _IGNORE,
        rf"(?:{_FR_VERB})\s+(?:de\s+|des\s+)?(?:{_FR_QUAL_BEFORE})\s+(?:{_WORD}\s+){{0,2}}?"
        rf"(?:{_FR_OBJECT})\b",
        rf"(?:{_FR_VERB})\s+(?:de\s+|des\s+)?(?:{_WORD}\s+){{0,3}}?(?:{_FR_OBJECT})\s+"
        rf"(?:{_WORD}\s+){{0,2}}?(?:{_FR_QUAL_AFTER})",
        r"(?:oublie[rz]?|ignore[rz]?)\s+tout\s+(?:ce\s+qu(?:e\s+|')(?:on\s+|je\s+)?(?:t'a|vous\s+a"
        r"|t'ai|vous\s+ai|m'a)\s+dit|ce\s+qui\s+pr[ée]c[èe]de|ce\s+qui\s+est\s+(?:au-dessus"
        r"|ci-dessus))",
        triggers="ignor|oubli|compte|abstraction|outre",
    ),
    _rule(
        "prompt_injection",
        _ROLE,
        r"tu\s+es\s+(?:maintenant|désormais|dorénavant|a\s+present|à\s+présent)\s+"
        r"(?:un|une|le|la|libre|sans|dan|en\s+mode|plus)\b",
        r"(?:à|a)\s+partir\s+de\s+maintenant,?\s+(?:tu|ta\s+seule|ton\s+seul|ignore|réponds)\b",
        r"(?:désormais|dorénavant),?\s+(?:tu|ta\s+seule|ton\s+seul|ignore|réponds)\b",
        r"fai[st]\s+semblant\s+d'[êe]tre\b|tu\s+n'es\s+plus\s+(?:un|une|l')",
        triggers="tu |partir|désormais|dorénavant|semblant",
    ),
    _rule(
        "prompt_injection",
        _HIDE,
        r"ne\s+(?:le\s+|lui\s+|leur\s+)?(?:dis|dites|révèle|révélez|montre|montrez)\s+(?:rien\s+)?"
        r"(?:de\s+(?:tout\s+)?(?:ça|cela|ceci)\s+)?(?:à|a)\s+l'utilisat(?:eur|rice)",
        r"sans\s+(?:le\s+)?(?:dire|prévenir|informer|avertir)\s+(?:(?:à|a)\s+)?l'utilisat(?:eur|rice)",
        r"cache[rz]?\s+(?:ceci|cela|ça|tout)\s+(?:à|a)\s+l'utilisat(?:eur|rice)",
        triggers="utilisat",
    ),
    _rule(
        "prompt_injection",
        _REVEAL,
        r"(?:révèle|révélez|affiche|affichez|montre|montrez|donne|donnez|répète|répétez)(?:-moi)?"
        r"\s+(?:ton|votre|le)\s+(?:prompt|invite|message)\s+(?:système|systeme|initial)",
        triggers="prompt|invite|message",
    ),
    # -- German --
    _rule(
        "prompt_injection",
        _IGNORE,
        rf"(?:{_DE_VERB})\s+(?:[\wäöüß]{{1,20}}\s+){{0,3}}?(?:{_DE_QUAL})\s+"
        rf"(?:[\wäöüß]{{1,20}}\s+){{0,2}}?(?:{_DE_OBJECT})\b",
        r"vergiss\s+alles,?\s+(?:was\s+(?:dir|man\s+dir|ich\s+dir|wir\s+dir)|was\s+(?:vorher|bisher)"
        r"|davor|bisherige|obige)",
        r"(?:ignorier(?:e|en\s+sie)?)\s+alles\s+(?:obige|bisherige|vorherige|davor|was)",
        triggers="ignorier|vergiss|vergessen|missacht|übergeh|über|hör",
    ),
    _rule(
        "prompt_injection",
        _ROLE,
        r"du\s+bist\s+(?:jetzt|nun|ab\s+jetzt|ab\s+sofort|von\s+nun\s+an)\s+(?:ein|eine|der|die|das"
        r"|kein|keine|frei|ohne|dan|im)\b",
        r"(?:ab\s+jetzt|ab\s+sofort|von\s+nun\s+an),?\s+(?:bist\s+du|du\s+bist|wirst\s+du"
        r"|antwortest\s+du|ignorierst\s+du|gilt\s+für\s+dich|ist\s+deine\s+einzige)\b",
        r"tu\s+so,?\s+als\s+(?:ob\s+du|wärst\s+du)|du\s+bist\s+kein(?:e)?\s+assistent",
        triggers="du |jetzt|sofort|nun an",
    ),
    _rule(
        "prompt_injection",
        _HIDE,
        r"sag(?:e|t|en\s+sie)?\s+(?:es\s+|das\s+|davon\s+)?(?:dem|der|den)\s+(?:benutzer|nutzer"
        r"|anwender)(?:in|n)?\s+nichts",
        r"ohne\s+(?:es\s+)?(?:dem|den|der)\s+(?:benutzer|nutzer|anwender)\w{0,3}\s+zu\s+"
        r"(?:sagen|informieren|verraten|zeigen)",
        r"verheimliche\s+(?:es|das|dies)\s+(?:vor\s+)?(?:dem|der|den)\s+(?:benutzer|nutzer|anwender)",
        triggers="benutzer|nutzer|anwender",
    ),
    _rule(
        "prompt_injection",
        _REVEAL,
        r"(?:gib|zeig|zeige|verrate|nenne|wiederhole)\s+(?:mir\s+)?(?:deinen|deine|dein|den)\s+"
        r"(?:system-?prompt|systemanweisung(?:en)?|ursprünglichen\s+anweisungen)",
        triggers="prompt|anweisung",
    ),
    # -- Spanish --
    _rule(
        "prompt_injection",
        _IGNORE,
        rf"(?:{_ES_VERB})\s+(?:[\wáéíóúñ]{{1,20}}\s+){{0,2}}?(?:{_ES_QUAL})\s+"
        rf"(?:[\wáéíóúñ]{{1,20}}\s+){{0,2}}?(?:{_ES_OBJECT})\b",
        rf"(?:{_ES_VERB})\s+(?:[\wáéíóúñ]{{1,20}}\s+){{0,2}}?(?:{_ES_OBJECT})\s+(?:{_ES_QUAL})\b",
        r"olvida\s+todo\s+lo\s+(?:que\s+(?:te\s+|se\s+te\s+)?(?:dijeron|dije|han\s+dicho|dijimos"
        r"|indicaron)|anterior)",
        triggers="ignor|olvid|descart|omit|caso",
    ),
    _rule(
        "prompt_injection",
        _ROLE,
        r"(?:ahora|a\s+partir\s+de\s+ahora|desde\s+ahora|de\s+ahora\s+en\s+adelante),?\s+(?:tú\s+)?"
        r"(?:eres|serás)\s+(?:un|una|el|la|libre|dan)\b",
        r"(?:a\s+partir\s+de\s+ahora|desde\s+ahora|de\s+ahora\s+en\s+adelante),?\s+(?:tu\s+única"
        r"|ignora|responde|respondes|no\s+tienes)\b",
        r"finge\s+(?:ser|que\s+eres)\b|ya\s+no\s+eres\s+(?:un|una|el|la)\b",
        triggers="ahora|finge|eres",
    ),
    _rule(
        "prompt_injection",
        _HIDE,
        r"no\s+(?:se\s+lo\s+|le\s+|les\s+)?(?:digas|cuentes|informes|menciones|muestres|diga)\s+"
        r"(?:nada\s+)?(?:de\s+esto\s+|esto\s+)?(?:al|a\s+los|a\s+la)\s+usuari[oa]s?",
        r"sin\s+(?:decírselo|decirle|avisar|informar|que\s+lo\s+sepa)\s+(?:al|a\s+los)\s+usuarios?",
        r"oculta(?:le|les)?\s+(?:esto\s+)?(?:al|a\s+los)\s+usuarios?",
        triggers="usuari",
    ),
    _rule(
        "prompt_injection",
        _REVEAL,
        r"(?:revela|muestra|muéstrame|imprime|dime|repite)\s+(?:tu|el)\s+(?:prompt|mensaje)\s+"
        r"(?:del|de)\s+sistema",
        triggers="sistema",
    ),
    # -- Japanese (no word boundaries) --
    _rule(
        "prompt_injection",
        _IGNORE,
        rf"(?:{_JA_QUAL})(?:の|に受けた|に与えられた|で受けた)?(?:すべての|全ての|全部の)?"
        rf"(?:{_JA_OBJECT})(?:は|を|も)?(?:すべて|全て|全部)?(?:無視|忘れ(?!ず)|破棄|捨て)",
        rf"(?:すべての|全ての)(?:{_JA_OBJECT})を(?:無視|忘れ(?!ず)|破棄)",
        triggers="無視|忘れ|破棄|捨て",
        word_start=False,
    ),
    _rule(
        "prompt_injection",
        _ROLE,
        # "あなたは今からデプロイを始められます" (you can now start) is prose; a new identity
        # ends in です/だ or becomes something (になる, として).
        r"(?:あなた|君|お前)は(?:今から|これから|今後|もう|今や)[^。\n]{0,40}?"
        r"(?:です|だ|である|になり|になる|として|を演じ)",
        r"(?:今から|これから)(?:あなた|君|お前)は[^。\n]{0,40}?(?:です|だ|である|になり|になる|として)",
        r"(?:に|と)なりきって|のふりをして|を演じて(?:ください|下さい)?",
        triggers="あなた|君|お前|なりきって|ふり|演じて",
        word_start=False,
    ),
    _rule(
        "prompt_injection",
        _HIDE,
        r"ユーザー(?:に|には|へは)(?:言わない|伝えない|知らせない|教えない|内緒|秘密|見せない)",
        triggers="ユーザー",
        word_start=False,
    ),
    _rule(
        "prompt_injection",
        _REVEAL,
        r"システムプロンプトを(?:表示|出力|教え|見せ|開示|繰り返)",
        triggers="システムプロンプト",
        word_start=False,
    ),
    _rule(
        "prompt_injection",
        "uses jailbreak vocabulary",
        r"制限を(?:解除|無視|外し)|制限のない(?:ai|アシスタント|モデル)|脱獄モード",
        triggers="制限|脱獄",
        word_start=False,
    ),
    # -- English paraphrases of an override --
    _rule(
        "prompt_injection",
        "asks to ignore everything said before",
        r"(?:disregard|ignore|forget|set\s+aside|put\s+aside|drop|discard)\s+(?:about\s+)?"
        r"(?:what|whatever|anything|everything)\s+(?:(?:that\s+)?you(?:'ve|\s+have|\s+were|\s+had)?"
        r"\s+(?:been\s+)?(?:told|given|instructed|taught)|(?:i|we|they)\s+(?:said|told\s+you))",
        r"(?:whatever|everything|anything)\s+you(?:'ve|\s+have|\s+were)?\s+(?:been\s+)?told\s+"
        r"(?:\w+\s+){0,3}?(?:no\s+longer\s+(?:applies|matters|counts)|does(?:n't|\s+not)\s+"
        r"(?:apply|matter|count)|is\s+(?:void|irrelevant|cancelled|canceled|obsolete))",
        r"(?:disregard|ignore|forget)\s+(?:what|whatever|anything|everything)\s+(?:the\s+(?:system"
        r"|developers?|admins?|operators?|system\s+prompt)|your\s+(?:creators?|developers?"
        r"|instructions|rules|system\s+prompt))\s+(?:said|says|told\s+you|tells\s+you)",
        r"pay\s+no\s+(?:attention|heed|mind)\s+to\s+(?:your|the|any|all)\s+(?:(?:previous|earlier"
        r"|prior|original|initial|above|system|old)\s+)?(?:instructions|rules|guidelines|prompt"
        r"|directives)",
        triggers="told|given|instructed|taught|said|attention|heed|mind",
    ),
    _rule(
        "prompt_injection",
        _IGNORE,
        r"(?:instructions|rules|guidelines|directives|constraints)\s+(?:(?:that\s+)?you\s+(?:were|have"
        r"\s+been)\s+given|given\s+to\s+you|you\s+(?:received|got))\s+(?:\w+\s+){0,2}?"
        r"(?:no\s+longer\s+apply|(?:are|have\s+been)\s+(?:now\s+)?(?:void|cancell?ed|revoked"
        r"|obsolete|null|invalid|lifted|overridden|replaced|suspended))",
        r"none\s+of\s+(?:your|the)\s+(?:(?:previous|earlier|prior|original|initial|system|old)\s+)?"
        r"(?:instructions|rules|guidelines|directives)\s+(?:apply|applies|matter|matters|count)",
        r"your\s+(?:previous|earlier|prior|original|old|initial|system)\s+(?:instructions|rules"
        r"|guidelines|directives)\s+(?:no\s+longer\s+apply|(?:are|have\s+been)\s+(?:now\s+)?"
        r"(?:void|cancell?ed|revoked|obsolete|null|invalid|lifted|overridden|replaced|suspended))",
        triggers="given|received|got|your|none",
    ),
)
