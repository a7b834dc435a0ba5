"""Reading recorded runs back: the terminal table and review data (``terminal``), the facts a report
opens with (``facts``), and the self-contained HTML page (``html``)."""
