# FedMIM (Liu et al.): Tables I–III and Fig. 2 at SCALE (paper | small | tiny). Included by the Makefile;
# runs go to $(OUT)/$(SCALE), tables to tables/, figures to figures/. Scenario files and every decision the
# paper leaves open: configs/fedmim/README.md. Example: make reproduce-fedmim-table3 SCALE=tiny
FEDMIM          = configs/fedmim
FEDMIM_DATASETS = cifar10 cifar100 tiny_imagenet
FEDMIM_TABLE1   = $(foreach d,$(FEDMIM_DATASETS),$(foreach s,iid dir0.3 dir0.1,$(FEDMIM)/table1_$(d)_$(s).yaml))
FEDMIM_TABLE2   = $(foreach d,$(FEDMIM_DATASETS),$(foreach e,1 5 10,$(FEDMIM)/table2_$(d)_e$(e).yaml))
FEDMIM_FIG2     = $(FEDMIM)/fig2a_p0.05.yaml $(FEDMIM)/fig2a_p0.2.yaml $(foreach d,$(FEDMIM_DATASETS),$(FEDMIM)/table1_$(d)_dir0.3.yaml)
FEDMIM_REPORT   = $(BIN)/fedbench compare --paper fedmim --table $(1) --out $(PAPER_OUT) --scale $(SCALE) --tables-dir tables && \
                  $(BIN)/fedbench claims --paper fedmim --out $(PAPER_OUT) --scale $(SCALE) --tables-dir tables

.PHONY: reproduce-fedmim-table1 reproduce-fedmim-table2 reproduce-fedmim-table3 reproduce-fedmim-fig2

reproduce-fedmim-table1: install  ## FedMIM Table I (3 datasets × IID/DIR.3/DIR.1) at SCALE: paper / ours, claims
	$(call PAPER_RUN,$(FEDMIM_TABLE1))
	$(call FEDMIM_REPORT,I)

reproduce-fedmim-table2: install  ## FedMIM Table II (3 datasets × E = 1, 5, 10) at SCALE: paper / ours, claims
	$(call PAPER_RUN,$(FEDMIM_TABLE2))
	$(call FEDMIM_REPORT,II)

reproduce-fedmim-table3: install  ## FedMIM Table III (α/β ablation) at SCALE: paper / ours, claims
	$(call PAPER_RUN,$(FEDMIM)/table3.yaml)
	$(call FEDMIM_REPORT,III)
	$(BIN)/fedbench plot --out $(PAPER_OUT) --scenario fedmim_table3$(PAPER_SUFFIX) --figures-dir figures --x round

reproduce-fedmim-fig2: install  ## FedMIM Fig. 2: (a) accuracy at 5%/20% participation, (b) local consistency (Table I DIR.3 runs)
	$(call PAPER_RUN,$(FEDMIM_FIG2))
	for s in fedmim_fig2a_p0.05 fedmim_fig2a_p0.2; do \
	  $(BIN)/fedbench plot --out $(PAPER_OUT) --scenario $$s$(PAPER_SUFFIX) --figures-dir figures --x round || exit 1; done
	for d in $(FEDMIM_DATASETS); do \
	  $(BIN)/fedbench plot --out $(PAPER_OUT) --scenario fedmim_table1_$${d}_dir0.3$(PAPER_SUFFIX) --figures-dir figures --x round --metric consistency || exit 1; done
