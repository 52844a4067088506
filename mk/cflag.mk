# C-FLAG (Keshri, Shah, Prasad): continual FL, Tables 2, 3, 7 (task-incremental) and 8 (class-incremental),
# accuracy matrices and the claims, at SCALE (paper | small | tiny). Included by the Makefile.
#   make reproduce-cflag-table3 SCALE=tiny    # IID task-incremental: Acc / Forgetting beside the paper's
# Scenario files and every paper-silent choice: configs/cflag/README.md.

CFLAG           = configs/cflag
CFLAG_DATASETS  = cifar10 cifar100 tinyimagenet
CFLAG_TI_IID    = $(foreach d,$(CFLAG_DATASETS),$(CFLAG)/ti_$(d)_iid.yaml)
CFLAG_TI_NONIID = $(foreach d,$(CFLAG_DATASETS),$(CFLAG)/ti_$(d)_noniid.yaml)
CFLAG_CI        = $(foreach d,cifar10 cifar100,$(foreach h,noniid iid,$(CFLAG)/ci_$(d)_$(h).yaml))
# Fig. 5 (clients, memory; Split-CIFAR10 and -100) and Fig. 6 (epochs) as grid files: one scenario per point
CFLAG_SWEEPS    = $(foreach g,fig5_clients_cifar10 fig5_clients_cifar100 fig5_memory fig5_memory_cifar100 fig6_epochs,\
                    configs/sweeps/cflag_$(g).yaml)
CFLAG_COMPARE   = $(BIN)/fedbench compare --paper cflag --out $(PAPER_OUT) --scale $(SCALE) --tables-dir tables
# accuracy-matrix heat maps and per-scenario Acc/Forgetting tables
CFLAG_MATRICES  = for f in $(1); do s=$$(basename $$f .yaml); \
                  $(BIN)/fedbench continual --out $(PAPER_OUT) --scenario cflag_$$s$(PAPER_SUFFIX) --tables-dir tables \
                    --figures-dir figures || exit 1; done

.PHONY: reproduce-cflag reproduce-cflag-table2 reproduce-cflag-table3 reproduce-cflag-table7 \
        reproduce-cflag-table8 reproduce-cflag-figures reproduce-cflag-ablations reproduce-cflag-claims

reproduce-cflag: reproduce-cflag-table7 reproduce-cflag-table8 reproduce-cflag-figures reproduce-cflag-ablations \
                 reproduce-cflag-claims  ## everything of C-FLAG at SCALE (the claims last: C11, C12 read the figures' runs)

reproduce-cflag-table3: install  ## C-FLAG Table 3 (IID, task-incremental) at SCALE: paper / ours
	$(call PAPER_RUN,$(CFLAG_TI_IID))
	$(call CFLAG_MATRICES,$(CFLAG_TI_IID))
	$(CFLAG_COMPARE) --table 3

reproduce-cflag-table2: install  ## C-FLAG Table 2 (non-IID, task-incremental) at SCALE: paper / ours
	$(call PAPER_RUN,$(CFLAG_TI_NONIID))
	$(call CFLAG_MATRICES,$(CFLAG_TI_NONIID))
	$(CFLAG_COMPARE) --table 2

reproduce-cflag-table7: reproduce-cflag-table2 reproduce-cflag-table3  ## C-FLAG Table 7 (both, mean ± std) from the same runs
	$(CFLAG_COMPARE) --table 7

reproduce-cflag-table8: install  ## C-FLAG Table 8 (class-incremental) at SCALE: paper / ours
	$(call PAPER_RUN,$(CFLAG_CI))
	$(call CFLAG_MATRICES,$(CFLAG_CI))
	$(CFLAG_COMPARE) --table 8

reproduce-cflag-figures: reproduce-cflag-table7  ## C-FLAG Figs. 2–4: per-task accuracy curves, ζ = 1 (Fig. 3), Γ(t) per round (Fig. 4)
	$(call PAPER_RUN,$(CFLAG)/fig3_cifar10_zeta1.yaml)
	$(call CFLAG_MATRICES,$(CFLAG)/fig3_cifar10_zeta1.yaml)
	for h in noniid iid; do \
	  $(BIN)/fedbench plot --out $(PAPER_OUT) --scenario cflag_ti_cifar10_$$h$(PAPER_SUFFIX) --x round --metric cflag.Gamma \
	    --name fig4 --algorithm C-FLAG || exit 1; done

reproduce-cflag-ablations: install  ## C-FLAG Figs. 5–6 (sweeps): clients {3, 5, 10} and memory per task {50, 150, 200, 300} on Split-CIFAR10/100, local epochs {1, 2, 4}
	$(PAPER_SWEEP) $(CFLAG_SWEEPS) --jobs $(PAPER_JOBS)
	for s in $$($(PAPER_SWEEP) $(CFLAG_SWEEPS) --dry-run | grep -o '^cflag_[^ ]*'); do \
	  $(BIN)/fedbench continual --out $(PAPER_OUT) --scenario $$s --tables-dir tables --figures-dir figures || exit 1; done

reproduce-cflag-claims: install  ## C-FLAG claims on the SCALE runs and the paper's numbers: tables/cflag_claims_$(SCALE).md
	$(BIN)/fedbench claims --paper cflag --out $(PAPER_OUT) --scale $(SCALE) --tables-dir tables
