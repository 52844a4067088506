# FedAMS / FedCAMS (Wang, Lin, Chen, ICML 2022): Tables 1–3, Figs. 1–7 and the claims at SCALE.
# Each target is `fedbench reproduce fedcams <target>` (finer ones: fig1 fig2_6 fig3 fig4_5 fig7); the targets are
# declared in fedbench/papers/fedcams/room.py. Scenario files and the decisions behind them: configs/fedcams/README.md.

.PHONY: reproduce-fedcams reproduce-fedcams-table1 reproduce-fedcams-table2 reproduce-fedcams-table3 reproduce-fedcams-figures reproduce-fedcams-claims

reproduce-fedcams: install  ## everything of FedCAMS at SCALE
	$(REPRODUCE) fedcams $(PAPER_OPTS)
reproduce-fedcams-table1: install  ## FedCAMS Table 1 (bit formulas), the paper's beside ours (written with Table 2)
	$(REPRODUCE) fedcams table1 $(PAPER_OPTS)
reproduce-fedcams-table2: install  ## FedCAMS Table 2 from ResNet-18's size: the paper's 12 values and ours, checked to 3 s.f.
	$(REPRODUCE) fedcams table2 $(PAPER_OPTS)
reproduce-fedcams-table3: install  ## FedCAMS Table 3 (FedAMS's ε ablation) at SCALE: paper / ours
	$(REPRODUCE) fedcams table3 $(PAPER_OPTS)
reproduce-fedcams-figures: install  ## FedCAMS Figs. 1–7 at SCALE: runs, final-accuracy tables, curves in figures/
	$(REPRODUCE) fedcams figures $(PAPER_OPTS)
reproduce-fedcams-claims: install  ## FedCAMS claims on the SCALE runs and on the paper's numbers: tables/fedcams_claims_$(SCALE).md
	$(REPRODUCE) fedcams claims $(PAPER_OPTS)
